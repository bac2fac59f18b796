package embedded

import "encoding/binary"

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
// Entries are grouped by thread (the key's thread bucket prefix, "" for
// keys outside threads), in two generations: when the newer holds
// hotThreads threads or hotBytes of keys and values it becomes the older
// and the older is dropped, so the cache holds at most twice that. A
// thread's entries are dropped when they reach hotPerThread (a thread of
// many runs would otherwise keep every run record it read).
type hotCache struct {
	cur, old map[string]map[string]hotVal
	curBytes int
	misses   int64 // reads that went to pebble (benchmarks report them)
}

// hotVal is a cached value; ok is false for a key known to be absent.
// dec, when not nil, is the value decoded (a *threadMeta or *runRec,
// records.go), never changed once cached.
type hotVal struct {
	v   []byte
	ok  bool
	dec any
}

const (
	hotThreads   = 4096
	hotBytes     = 16 << 20
	hotPerThread = 64
)

func newHotCache() *hotCache {
	return &hotCache{cur: map[string]map[string]hotVal{}, old: map[string]map[string]hotVal{}}
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

var threadsPrefix = childPrefix(nil, bThreads)

func (h *hotCache) get(key []byte) (hotVal, bool) {
	th := threadOf(key)
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
	th := threadOf(key)
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
func (h *hotCache) fill(fills map[string]hotVal) {
	if h == nil {
		return
	}
	for k, v := range fills {
		th := string(threadOf([]byte(k)))
		m, ok := h.cur[th]
		if !ok {
			if len(h.cur) >= hotThreads || h.curBytes >= hotBytes {
				h.old, h.cur, h.curBytes = h.cur, make(map[string]map[string]hotVal, hotThreads), 0
			}
			m = h.old[th]
			delete(h.old, th)
			if m == nil {
				m = make(map[string]hotVal, 8)
			}
			h.cur[th] = m
		}
		if len(m) >= hotPerThread {
			clear(m)
		}
		m[k] = v
		h.curBytes += len(k) + len(v.v)
	}
}
