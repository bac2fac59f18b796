package embedded

import (
	"encoding/binary"

	"github.com/chronicle-proxy/chronicle/store"
)

// hotCache holds committed values of keys the committer read lately (a
// thread's marker, meta, system blob, runs; the run id and index entries),
// so that the next step on the same thread finds them in a map instead of
// seeking pebble's memtable and tables: a turn's start and finish read the
// same half-dozen keys. Only the committer goroutine touches it. A
// transaction reads through it and records what it read, from pebble or
// from the cache, with the meta and run records decoded (hotVal.dec,
// records.go) (Tx.fills); its
// writes update the values it read and drop any other key from the cache,
// and a deleted range drops the whole thread it lies in; the fills enter
// the cache only once the batch has committed, so a failed group leaves
// nothing in it that is not on disk.
//
// Entries are grouped by thread (the key's thread bucket prefix), and
// keys outside threads by their root bucket (upd, runids, …), in two
// generations: when the newer holds hotThreads groups or hotBytes of keys
// and values it becomes the older and the older is dropped, so the cache
// holds at most twice that. A thread's group keeps at most hotPerThread
// entries: when it is full, everything but the thread's marker, meta,
// system blob and running runs is dropped (a thread of many runs would
// otherwise keep every finished run's record it wrote, one a turn, and
// lose its meta with them every sixty turns). A root bucket's group keeps
// hotPerRoot (the upd entry of every thread a turn finished on), and is
// cleared when full.
type hotCache struct {
	cur, old map[string]map[string]hotVal
	curBytes int
	misses   int64 // reads that went to pebble (benchmarks report them)
	// perThread and perRoot bound a group (hotPerThread, hotPerRoot;
	// tests make them small).
	perThread, perRoot int
}

// hotVal is a cached value; ok is false for a key known to be absent.
// dec, when not nil, is the value decoded (a *threadMeta or *runRec,
// records.go), never changed once cached.
type hotVal struct {
	v   []byte
	ok  bool
	dec any
	// key is the key as the cache holds it (set by fill), so that a
	// transaction recording a value it found there does not convert the
	// key again.
	key string
}

const (
	hotThreads   = 4096
	hotBytes     = 16 << 20
	hotPerThread = 64
	hotPerRoot   = hotThreads
)

func newHotCache() *hotCache {
	return &hotCache{cur: map[string]map[string]hotVal{}, old: map[string]map[string]hotVal{}, perThread: hotPerThread, perRoot: hotPerRoot}
}

// threadOf is the thread bucket prefix key lies in, or "" for a key
// outside every thread bucket.
func threadOf(key []byte) []byte {
	if len(key) <= len(threadsPrefix) || string(key[:len(threadsPrefix)]) != string(threadsPrefix) || key[len(threadsPrefix)] != tagBucket {
		return nil
	}
	n, w := binary.Uvarint(key[len(threadsPrefix)+1:])
	end := len(threadsPrefix) + 1 + w + int(n)
	if w <= 0 || end > len(key) {
		return nil
	}
	return key[:end]
}

// groupOf is the group key belongs to: its thread bucket prefix (thread
// is true), or else its root bucket's prefix ("" for a malformed key).
func groupOf(key []byte) (group []byte, thread bool) {
	if th := threadOf(key); th != nil {
		return th, true
	}
	if len(key) == 0 || key[0] != tagBucket {
		return nil, false
	}
	n, w := binary.Uvarint(key[1:])
	end := 1 + w + int(n)
	if w <= 0 || end > len(key) {
		return nil, false
	}
	return key[:end], false
}

var threadsPrefix = childPrefix(nil, bThreads)

func (h *hotCache) get(key []byte) (hotVal, bool) {
	th, _ := groupOf(key)
	if m, ok := h.cur[string(th)]; ok {
		if v, ok := m[string(key)]; ok {
			return v, true
		}
	}
	if m, ok := h.old[string(th)]; ok {
		if v, ok := m[string(key)]; ok {
			return v, true
		}
	}
	return hotVal{}, false
}

// drop forgets key.
func (h *hotCache) drop(key []byte) {
	th, _ := groupOf(key)
	if m, ok := h.cur[string(th)]; ok {
		delete(m, string(key))
	}
	if m, ok := h.old[string(th)]; ok {
		delete(m, string(key))
	}
}

// dropRange forgets every key from start on that shares start's thread
// (the whole thread), or everything for a range outside threads.
func (h *hotCache) dropRange(start []byte) {
	th := threadOf(start)
	if th == nil {
		clear(h.cur)
		clear(h.old)
		return
	}
	delete(h.cur, string(th))
	delete(h.old, string(th))
}

// fill stores what a committed transaction read and wrote.
func (h *hotCache) fill(fills map[string]*hotVal) {
	if h == nil {
		return
	}
	for k, p := range fills {
		v := *p
		g, thread := groupOf([]byte(k))
		m, ok := h.cur[string(g)]
		if !ok {
			if len(h.cur) >= hotThreads || h.curBytes >= hotBytes {
				h.old, h.cur, h.curBytes = h.cur, make(map[string]map[string]hotVal, hotThreads), 0
			}
			m = h.old[string(g)]
			delete(h.old, string(g))
			if m == nil {
				m = make(map[string]hotVal, 8)
			}
			h.cur[string(g)] = m
		}
		switch {
		case thread && len(m) >= h.perThread:
			h.keepThread(string(g), m)
		case !thread && len(m) >= h.perRoot:
			clear(m)
		}
		v.key = k
		if old, ok := m[k]; ok {
			// A hit is filled again: count what replaces it, not both.
			h.curBytes -= len(k) + len(old.v)
		}
		m[k] = v
		h.curBytes += len(k) + len(v.v)
	}
}

// keepThread empties a full thread group m of th but for the entries each
// step on the thread reads: its marker, meta, system blob and running
// runs' records.
func (h *hotCache) keepThread(th string, m map[string]hotVal) {
	for k, v := range m {
		if k == th || (len(k) > len(th) && k[len(th)] == tagLeaf && (k[len(th)+1:] == string(kMeta) || k[len(th)+1:] == string(kSys))) {
			continue
		}
		if r, ok := v.dec.(*runRec); ok && r.Status == store.Running {
			continue
		}
		delete(m, k)
	}
	if len(m) >= h.perThread {
		clear(m)
	}
}
