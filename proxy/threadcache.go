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
	digest string // store.Digest(hashes)
	// buf is the messages as a JSON array without its closing bracket;
	// msgs slice it. The next transcript, when it only adds messages,
	// appends them in place past len(buf) (extended makes that happen at
	// most once per entry), so a long thread is not copied every turn; no
	// reader of this entry ever looks past len(buf).
	//
	// An entry whose transcript drops messages of the one before (a
	// regenerated reply) has no buf: its first rootN messages are slices
	// of the earlier buffer root, the others of a small buffer of its own.
	buf        []byte
	root       []byte
	rootN      int
	extended   atomic.Bool
	msgs       [][]byte // raw messages, byte-for-byte as stored
	hashes     []store.Hash
	info       []msgInfo
	restorable bool // some message carries a field Restore could put back
	// firstRestorable is the index of the first such message.
	firstRestorable int
	infoBytes       int64 // what info's call ids take
	size            int64
}

// array returns the messages as a JSON array (a copy).
func (ct *cachedThread) array() []byte {
	if ct.buf == nil {
		return joinArray(ct.msgs)
	}
	return append(ct.buf[:len(ct.buf):len(ct.buf)], ']')
}

// shared returns the buffer the entry's first n messages are slices of.
func (ct *cachedThread) shared() (buf []byte, n int) {
	if ct == nil {
		return nil, 0
	}
	if ct.buf != nil {
		return ct.buf, len(ct.msgs)
	}
	return ct.root, ct.rootN
}

// msgInfo is what compose reads of one message.
type msgInfo struct {
	calls     bool // makes tool calls
	synthetic bool // a result repair wrote
	// The rest, behind a pointer: a turn that regenerates a reply copies
	// a thread's worth of infos, so each is 16 bytes.
	detail *msgDetail
}

type msgDetail struct {
	results []string // call ids it answers
	skim    repair.Skim
}

// results are the call ids the message answers.
func (in msgInfo) results() []string {
	if in.detail == nil {
		return nil
	}
	return in.detail.results
}

// plainSkim is the skim of an info without detail; never written.
var plainSkim repair.Skim

// skim is what repair reads of the message.
func (in msgInfo) skim() *repair.Skim {
	if in.detail == nil {
		return &plainSkim
	}
	return &in.detail.skim
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

// newCachedThread keeps msgs with their hashes and infos (which it takes
// as they are); infos[i] belongs to msgs[i]. base, when not nil, holds
// msgs[:keep] byte for byte, and the messages taken from it are not
// searched again for restorable fields.
func newCachedThread(ad adapters.Adapter, k store.Key, msgs [][]byte, hashes []store.Hash, info []msgInfo, base *cachedThread, keep int) *cachedThread {
	ct := &cachedThread{key: k, format: ad.Format(), digest: store.Digest(hashes), hashes: hashes, info: info}
	scanFrom := 0
	if base != nil && !base.restorable {
		scanFrom = keep // a prefix of base has no restorable field either
	}
	n := 1
	for _, m := range msgs {
		n += len(m) + 1
	}
	ct.buf = append(make([]byte, 0, n+headroom(n)), '[')
	ct.msgs = make([][]byte, 0, len(msgs)+len(msgs)/4+8)
	ct.appendMessages(ad, msgs, scanFrom)
	ct.infoBytes = sizeOf(info)
	ct.size = int64(cap(ct.buf)) + int64(len(msgs))*(24+16+64) + 256 + ct.infoBytes
	return ct
}

// headroom is the room a new buffer of n bytes gets for the messages of
// later turns: a quarter more, so a growing thread is seldom copied, and
// at most 1 MiB, so a thread that starts with one huge message does not
// keep megabytes it will not use.
func headroom(n int) int {
	return min(n/4, 1<<20) + 1024
}

// nextCachedThread is the entry for a transcript whose first keep messages
// are stored as stored[:keep] (base's, when base is not nil) and the rest
// are parts[keep:], with hashes and infos for all. When keep is all of
// base and base's claim is free (or claimed: the caller holds it), base is
// extended in place; otherwise the messages are copied.
func nextCachedThread(ad adapters.Adapter, k store.Key, base *cachedThread, claimed bool, keep int, stored, parts [][]byte, hashes []store.Hash, info []msgInfo) *cachedThread {
	if base != nil && base.buf != nil && keep == len(base.msgs) && keep <= len(parts) {
		if !base.fits(parts[keep:]) {
			// Outgrown: the whole transcript moves to a buffer with room.
			return newCachedThread(ad, k, append(stored[:keep:keep], parts[keep:]...), hashes, info, base, keep)
		}
		if claimed || base.extended.CompareAndSwap(false, true) {
			return extendCachedThread(ad, base, parts[keep:], hashes, info)
		}
	}
	if root, n := base.shared(); base != nil && keep > 0 && keep <= n && keep <= len(parts) {
		return shareCachedThread(ad, base, root, keep, parts[keep:], hashes, info)
	}
	msgs := append(stored[:keep:keep], parts[keep:]...)
	return newCachedThread(ad, k, msgs, hashes, info, base, keep)
}

// shareCachedThread keeps base's first keep messages, which are slices of
// root, followed by added (copied), without copying the kept ones.
func shareCachedThread(ad adapters.Adapter, base *cachedThread, root []byte, keep int, added [][]byte, hashes []store.Hash, info []msgInfo) *cachedThread {
	ct := &cachedThread{key: base.key, format: base.format, digest: store.Digest(hashes), hashes: hashes, info: info,
		root: root, rootN: keep}
	n := 0
	for _, m := range added {
		n += len(m)
	}
	own := make([]byte, 0, n)
	ct.msgs = append(make([][]byte, 0, keep+len(added)+8), base.msgs[:keep]...)
	if base.restorable && base.firstRestorable < keep {
		ct.restorable, ct.firstRestorable = true, base.firstRestorable
	}
	for _, m := range added {
		off := len(own)
		own = append(own, m...)
		ct.msgs = append(ct.msgs, own[off:len(own):len(own)])
		if !ct.restorable && ad.Restorable(m) {
			ct.restorable, ct.firstRestorable = true, len(ct.msgs)-1
		}
	}
	ct.infoBytes = sizeOf(info)
	ct.size = int64(cap(root)) + int64(cap(own)) + int64(len(ct.msgs))*(24+16+64) + 256 + ct.infoBytes
	return ct
}

// fits reports whether added fit in the room past ct's buffer. A thread
// that outgrows it is copied into a buffer with room of its own: appending
// past the capacity would move the buffer, and ct's messages would keep
// the old one alive beside the new.
func (ct *cachedThread) fits(added [][]byte) bool {
	room := cap(ct.buf) - len(ct.buf)
	for _, m := range added {
		room -= len(m) + 1
	}
	return room >= 0
}

// extendCachedThread keeps base's messages followed by added, with hashes
// and infos for all of them. The caller holds base's claim (extended): the
// new entry's buffer and message slices are base's, extended in place
// past their length, so a long thread is not copied every turn.
func extendCachedThread(ad adapters.Adapter, base *cachedThread, added [][]byte, hashes []store.Hash, info []msgInfo) *cachedThread {
	ct := &cachedThread{key: base.key, format: base.format, digest: store.Digest(hashes), hashes: hashes, info: info,
		buf: base.buf, msgs: base.msgs, restorable: base.restorable, firstRestorable: base.firstRestorable}
	// added may share msgs' array past its length (the turn's parts):
	// each element is read before its slot is written.
	ct.appendMessages(ad, added, 0)
	ct.infoBytes = base.infoBytes + sizeOf(info[len(base.msgs):])
	ct.size = int64(cap(ct.buf)) + int64(len(ct.msgs))*(24+16+64) + 256 + ct.infoBytes
	return ct
}

// appendMessages adds msgs to buf and to the message slices, and checks
// those from scanFrom on for restorable fields.
func (ct *cachedThread) appendMessages(ad adapters.Adapter, msgs [][]byte, scanFrom int) {
	for i, m := range msgs {
		if len(ct.msgs) > 0 {
			ct.buf = append(ct.buf, ',')
		}
		off := len(ct.buf)
		ct.buf = append(ct.buf, m...)
		ct.msgs = append(ct.msgs, ct.buf[off:len(ct.buf):len(ct.buf)])
		if i >= scanFrom && !ct.restorable && ad.Restorable(m) {
			ct.restorable, ct.firstRestorable = true, len(ct.msgs)-1
		}
	}
}

func sizeOf(info []msgInfo) (n int64) {
	for _, in := range info {
		if in.detail != nil {
			n += 96
		}
		for _, r := range in.results() {
			n += int64(len(r)) + 16
		}
	}
	return n
}

// infoOf parses what compose reads of one message. A message that neither
// answers a tool call nor gives repair anything to read (most of a chat)
// gets no detail: one heap object less per kept message, for the thread
// cache's memory and for every GC's mark.
func infoOf(ad adapters.Adapter, m adapters.Message) msgInfo {
	skim := ad.Skim(m.Raw)
	in := msgInfo{calls: len(m.Calls) > 0}
	if len(m.Results) == 0 && skim.Plain() {
		return in
	}
	d := &msgDetail{skim: skim}
	in.detail = d
	for _, r := range m.Results {
		d.results = append(d.results, strings.Clone(r.CallID))
	}
	if len(m.Results) > 0 {
		in.synthetic = repair.IsSynthetic(m.Raw)
	}
	return in
}

// threadFromStore builds the entry for a thread read from the store,
// parsing every message once.
func threadFromStore(ad adapters.Adapter, th store.Thread) *cachedThread {
	ct := newCachedThread(ad, th.Key, th.Messages, th.Hashes, make([]msgInfo, len(th.Messages)), nil, 0)
	i := 0
	_ = ad.WalkMessages(ct.array(), func(m adapters.Message) bool {
		if i < len(ct.info) {
			ct.info[i] = infoOf(ad, m)
		}
		i++
		return true
	})
	if i != len(ct.msgs) {
		return nil // not this format's messages: keep nothing
	}
	ct.infoBytes = sizeOf(ct.info)
	ct.size += ct.infoBytes
	return ct
}
