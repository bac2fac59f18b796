package proxy

import (
	"container/list"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/repair"
	"github.com/chronicle-proxy/chronicle/store"
)

// threadCache keeps, per thread, the transcript this replica last read or
// wrote, with what compose reads of each message. The next turn then sends
// the transcript's digest with its start, and when the store still holds
// that transcript (Started.Unchanged) it neither reads the messages back
// nor parses them: a request that repeats the history is matched against
// the kept bytes, and only messages past the common prefix are parsed.
//
// The store stays the truth: a thread written elsewhere since (another
// replica, a delete) has another digest, is read in full and replaces the
// entry. Entries are immutable once built; the cache holds at most max
// bytes and drops the least recently used thread first.
type threadCache struct {
	mu    sync.Mutex
	max   int64
	size  int64
	order *list.List // front: most recently used; values are *cachedThread
	byKey map[store.Key]*list.Element

	hits, misses atomic.Int64 // starts whose transcript was kept / read
}

// cachedThread is one kept transcript.
type cachedThread struct {
	key    store.Key
	format adapters.Format
	digest string   // store.Digest(hashes)
	joined []byte   // the messages as one JSON array; msgs slice it
	msgs   [][]byte // raw messages, byte-for-byte as stored
	hashes []store.Hash
	info   []msgInfo
	size   int64
}

// msgInfo is what compose reads of one message.
type msgInfo struct {
	calls     bool     // makes tool calls
	results   []string // call ids it answers
	synthetic bool     // a result repair wrote
	skim      repair.Skim
}

func newThreadCache(maxBytes int64) *threadCache {
	if maxBytes <= 0 {
		return nil
	}
	return &threadCache{max: maxBytes, order: list.New(), byKey: map[store.Key]*list.Element{}}
}

// get returns the kept transcript of k in format f, or nil.
func (c *threadCache) get(k store.Key, f adapters.Format) *cachedThread {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byKey[k]
	if e == nil {
		return nil
	}
	ct := e.Value.(*cachedThread)
	if ct.format != f {
		return nil
	}
	c.order.MoveToFront(e)
	return ct
}

// put keeps ct, replacing what was kept for its thread.
func (c *threadCache) put(ct *cachedThread) {
	if c == nil || ct == nil || ct.size > c.max/4 {
		if c != nil && ct != nil {
			c.drop(ct.key)
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.byKey[ct.key]; e != nil {
		c.size -= e.Value.(*cachedThread).size
		e.Value = ct
		c.order.MoveToFront(e)
	} else {
		c.byKey[ct.key] = c.order.PushFront(ct)
	}
	c.size += ct.size
	for c.size > c.max {
		last := c.order.Back()
		old := last.Value.(*cachedThread)
		c.order.Remove(last)
		delete(c.byKey, old.key)
		c.size -= old.size
	}
}

// counted records whether a start found its transcript kept.
func (c *threadCache) counted(hit bool) {
	if c == nil {
		return
	}
	if hit {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
}

// drop forgets k.
func (c *threadCache) drop(k store.Key) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.byKey[k]; e != nil {
		c.size -= e.Value.(*cachedThread).size
		c.order.Remove(e)
		delete(c.byKey, k)
	}
}

// newCachedThread keeps msgs (copied into one array) with their hashes
// and infos; infos[i] belongs to msgs[i].
func newCachedThread(k store.Key, f adapters.Format, msgs [][]byte, hashes []store.Hash, info []msgInfo) *cachedThread {
	joined := joinArray(msgs)
	ct := &cachedThread{key: k, format: f, digest: store.Digest(hashes), joined: joined,
		msgs: make([][]byte, len(msgs)), hashes: hashes, info: info}
	off := 1
	for i, m := range msgs {
		ct.msgs[i] = joined[off : off+len(m) : off+len(m)]
		off += len(m) + 1
	}
	ct.size = int64(len(joined)) + int64(len(msgs))*(24+16+64) + 256 + sizeOf(info)
	return ct
}

func sizeOf(info []msgInfo) (n int64) {
	for _, in := range info {
		for _, r := range in.results {
			n += int64(len(r)) + 16
		}
	}
	return n
}

// infoOf parses what compose reads of one message.
func infoOf(ad adapters.Adapter, m adapters.Message) msgInfo {
	in := msgInfo{calls: len(m.Calls) > 0}
	for _, r := range m.Results {
		in.results = append(in.results, strings.Clone(r.CallID))
	}
	if len(m.Results) > 0 {
		in.synthetic = repair.IsSynthetic(m.Raw)
	}
	in.skim = skimOf(ad.Format())(m.Raw)
	return in
}

// threadFromStore builds the entry for a thread read from the store,
// parsing every message once.
func threadFromStore(ad adapters.Adapter, th store.Thread) *cachedThread {
	ct := newCachedThread(th.Key, ad.Format(), th.Messages, th.Hashes, make([]msgInfo, len(th.Messages)))
	i := 0
	_ = ad.WalkMessages(ct.joined, func(m adapters.Message) bool {
		if i < len(ct.info) {
			ct.info[i] = infoOf(ad, m)
		}
		i++
		return true
	})
	if i != len(ct.msgs) {
		return nil // not this format's messages: keep nothing
	}
	ct.size += sizeOf(ct.info)
	return ct
}

// skimOf is the repair skim of a format's messages.
func skimOf(f adapters.Format) func([]byte) repair.Skim {
	switch f {
	case adapters.FormatGemini:
		return repair.SkimGemini
	case adapters.FormatOpenAIResponses:
		return repair.SkimResponses
	}
	return repair.SkimOpenAIChat
}

// validSkims is repair's validity check of a format, read off skims.
func validSkims(f adapters.Format, skims []repair.Skim) bool {
	switch f {
	case adapters.FormatGemini:
		return repair.ValidGeminiSkims(skims)
	case adapters.FormatOpenAIResponses:
		return repair.ValidResponsesSkims(skims)
	}
	return repair.ValidOpenAIChatSkims(skims)
}
