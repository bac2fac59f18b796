package embedded

import (
	"encoding/binary"
	"errors"
	"io"

	"github.com/cockroachdb/pebble/v2"

	"github.com/chronicle-proxy/chronicle/store"
)

// The store's data lives in one pebble key space. Buckets, the nesting the
// store's layout is written in (embedded.go), are key prefixes: a bucket's
// prefix is its parent's, then 0x02, the name's length as a uvarint and
// the name; a leaf key in it is the prefix, then 0x01 and the key. So the
// leaves of one bucket are contiguous and in key order, and a bucket with
// everything under it is one range.
//
// Buckets are implicit (absent means empty), except the children of a
// bucket opened with marked set (the thread buckets under t): those exist
// when their marker, the key equal to their prefix, does, so a thread
// that was never written or was deleted reads as absent.
const (
	tagLeaf   = 0x01
	tagBucket = 0x02
)

// Tx is a read (a snapshot) or a write (an indexed batch, which reads its
// own writes) over the key space. Values and keys it returns stay valid
// until the transaction ends, as with bbolt.
type Tx struct {
	r interface {
		Get(key []byte) ([]byte, io.Closer, error)
		NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
	}
	w       *pebble.Batch // nil in a read
	closers []io.Closer
	// markers remembers the thread buckets this transaction found or
	// made: a step asks for its thread's bucket several times. A step
	// has a thread or a few: a list, looked through, up to maxMarkers,
	// and a map past them (a read or a sweep over many threads).
	markers   []marker
	markerMap map[string]bool
	// arena holds the keys and bucket prefixes the transaction builds,
	// and slab its buckets (alloc, newBucket): carved one after another
	// and never reused while the transaction lives, so a step allocates
	// a chunk, not each key. pebble copies what a batch is given.
	arena []byte
	slab  []Bucket
	// hot is the committer's cache (nil in a read); fills are the values
	// this transaction read, as its own writes left them (hot.go).
	hot   *hotCache
	fills map[string]*hotVal // the values in vals (newVal)
	vals  []hotVal
	err   error // the first failure of a read that had no error to return
}

// marker is whether a thread bucket's marker exists.
type marker struct {
	prefix []byte
	ok     bool
}

const (
	arenaChunk = 4 << 10
	slabChunk  = 16
	maxMarkers = 8
)

// alloc returns an empty slice with room for n bytes, from the arena
// (or a fresh one: tx nil, n large).
func (tx *Tx) alloc(n int) []byte {
	if tx == nil || n > arenaChunk/8 {
		return make([]byte, 0, n)
	}
	if cap(tx.arena)-len(tx.arena) < n {
		// Each chunk twice the last, up to what scratch keeps: the
		// transaction after a large group finds room in the one chunk
		// it is handed, not a chunk to allocate every 4 KiB.
		size := min(max(arenaChunk, 2*cap(tx.arena)), maxKeptArena)
		if cap(tx.arena) == 0 {
			size = arenaChunk / 8 // a read of a few keys
		}
		tx.arena = make([]byte, 0, size)
	}
	i := len(tx.arena)
	tx.arena = tx.arena[:i+n]
	return tx.arena[i : i : i+n]
}

// newVal is a fill of tx, from vals (chunked like the slab: a fill stays
// where it is).
func (tx *Tx) newVal(hv hotVal) *hotVal {
	if len(tx.vals) == cap(tx.vals) {
		tx.vals = make([]hotVal, 0, nextChunk(cap(tx.vals)))
	}
	tx.vals = append(tx.vals, hv)
	return &tx.vals[len(tx.vals)-1]
}

// nextChunk is the length of the slab's or the fills' next chunk after
// one of last: twice it, up to what scratch keeps (as the arena's).
func nextChunk(last int) int { return min(max(slabChunk, 2*last), maxKeptScratch) }

// newBucket is a bucket of tx, from the slab.
func (tx *Tx) newBucket(prefix []byte, marked bool) *Bucket {
	if len(tx.slab) == cap(tx.slab) {
		tx.slab = make([]Bucket, 0, nextChunk(cap(tx.slab)))
	}
	tx.slab = append(tx.slab, Bucket{tx: tx, prefix: prefix, marked: marked})
	return &tx.slab[len(tx.slab)-1]
}

func (tx *Tx) end() error {
	for _, c := range tx.closers {
		if err := c.Close(); err != nil && tx.err == nil {
			tx.err = err
		}
	}
	tx.closers = tx.closers[:0]
	return tx.err
}

func (tx *Tx) fail(err error) {
	if tx.err == nil {
		tx.err = err
	}
}

// Bucket opens a root bucket.
func (tx *Tx) Bucket(name []byte) *Bucket {
	p, ok := rootPrefixes[string(name)]
	if !ok {
		p = tx.childPrefix(nil, name)
	}
	return tx.newBucket(p, string(name) == string(bThreads))
}

// rootPrefixes are the root buckets' prefixes, built once (read only).
var rootPrefixes = func() map[string][]byte {
	m := map[string][]byte{}
	for _, name := range rootBuckets {
		p := childPrefix(nil, name)
		m[string(name)] = p[:len(p):len(p)] // shared: an append copies
	}
	return m
}()

// Bucket is a key prefix inside a transaction.
type Bucket struct {
	tx     *Tx
	prefix []byte
	marked bool // children exist only with their marker
}

func childPrefix(parent, name []byte) []byte {
	var tx *Tx
	return tx.childPrefix(parent, name)
}

// childPrefix is the prefix of parent's child bucket name, in the arena.
func (tx *Tx) childPrefix(parent, name []byte) []byte {
	p := tx.alloc(len(parent) + 1 + binary.MaxVarintLen32 + len(name))
	p = append(p, parent...)
	p = append(p, tagBucket)
	p = binary.AppendUvarint(p, uint64(len(name)))
	return append(p, name...)
}

// leaf is the key of key in b, in the arena.
func (b *Bucket) leaf(key []byte) []byte {
	k := b.tx.alloc(len(b.prefix) + 1 + len(key))
	k = append(append(k, b.prefix...), tagLeaf)
	return append(k, key...)
}

// leafString is leaf of a string key.
func (b *Bucket) leafString(key string) []byte {
	k := b.tx.alloc(len(b.prefix) + 1 + len(key))
	k = append(append(k, b.prefix...), tagLeaf)
	return append(k, key...)
}

// Bucket opens the child bucket name: nil when b's children are marked and
// name's marker is absent.
func (b *Bucket) Bucket(name []byte) *Bucket {
	p := b.tx.childPrefix(b.prefix, name)
	if b.marked && !b.tx.marked(p) {
		return nil
	}
	return b.tx.newBucket(p, false)
}

// marker finds prefix in the markers (-1: not there).
func (tx *Tx) marker(prefix []byte) int {
	for i := range tx.markers {
		if string(tx.markers[i].prefix) == string(prefix) {
			return i
		}
	}
	return -1
}

func (tx *Tx) marked(prefix []byte) bool {
	if i := tx.marker(prefix); i >= 0 {
		return tx.markers[i].ok
	}
	if ok, seen := tx.markerMap[string(prefix)]; seen {
		return ok
	}
	ok := tx.get(prefix) != nil
	tx.setMarker(prefix, ok)
	return ok
}

// setMarker records whether the marker prefix exists.
func (tx *Tx) setMarker(prefix []byte, ok bool) {
	if i := tx.marker(prefix); i >= 0 {
		tx.markers[i].ok = ok
		return
	}
	if _, seen := tx.markerMap[string(prefix)]; seen || len(tx.markers) >= maxMarkers {
		if tx.markerMap == nil {
			tx.markerMap = make(map[string]bool)
		}
		tx.markerMap[string(prefix)] = ok
		return
	}
	tx.markers = append(tx.markers, marker{prefix: prefix, ok: ok})
}

// CreateBucketIfNotExists opens the child bucket name, writing its marker
// when b's children are marked.
func (b *Bucket) CreateBucketIfNotExists(name []byte) (*Bucket, error) {
	p := b.tx.childPrefix(b.prefix, name)
	if b.marked && !b.tx.marked(p) {
		if err := b.tx.set(p, nil); err != nil {
			return nil, err
		}
		b.tx.setMarker(p, true)
	}
	return b.tx.newBucket(p, false), b.tx.err
}

// DeleteBucket removes the child bucket name and everything under it.
func (b *Bucket) DeleteBucket(name []byte) error {
	p := b.tx.childPrefix(b.prefix, name)
	if b.tx.w == nil {
		return errReadOnly
	}
	if i := b.tx.marker(p); i >= 0 {
		b.tx.markers = append(b.tx.markers[:i], b.tx.markers[i+1:]...)
	}
	delete(b.tx.markerMap, string(p))
	if b.tx.hot != nil {
		for k, hv := range b.tx.fills {
			if len(k) >= len(p) && k[:len(p)] == string(p) {
				*hv = hotVal{}
			}
		}
		b.tx.hot.dropRange(p)
	}
	return b.tx.w.DeleteRange(p, prefixEnd(p), nil)
}

var errReadOnly = errors.New("embedded: write in a read transaction")

// Get returns the value of key, or nil when it is absent (a present empty
// value is a non-nil empty slice).
func (b *Bucket) Get(key []byte) []byte { return b.tx.get(b.leaf(key)) }

// GetString is Get of a string key.
func (b *Bucket) GetString(key string) []byte { return b.tx.get(b.leafString(key)) }

// Put sets key to value.
func (b *Bucket) Put(key, value []byte) error { return b.tx.set(b.leaf(key), value) }

// putOwned is Put of a value the transaction may keep (Tx.setOwned).
func (b *Bucket) putOwned(key, value []byte) error {
	return b.tx.setOwned(b.leaf(key), value, true)
}

// threadID is the thread's id (the key of its bucket and index entries),
// in the arena.
func (tx *Tx) threadID(k store.Key) []byte {
	id := tx.alloc(len(k.Tenant) + 1 + len(k.Thread))
	id = append(append(id, k.Tenant...), 0)
	return append(id, k.Thread...)
}

// runKey is runKey(k, run), in the arena.
func (tx *Tx) runKey(k store.Key, run string) []byte {
	id := tx.alloc(len(k.Tenant) + 1 + len(k.Thread) + 1 + len(run))
	id = append(append(id, k.Tenant...), 0)
	id = append(append(id, k.Thread...), 0)
	return append(id, run...)
}

// PutString is Put of a string key.
func (b *Bucket) PutString(key string, value []byte) error {
	return b.tx.set(b.leafString(key), value)
}

// asRead has the committer treat key as read by this transaction
// (recorded in its fills), so that the value it is about to write enters
// the hot cache once the batch commits: the run record a start makes
// without reading it first (store.StartRun.FreshRunID) is what its
// finish reads next.
func (tx *Tx) asRead(key []byte) {
	if tx.hot == nil {
		return
	}
	if tx.fills == nil {
		tx.fills = make(map[string]*hotVal, 8)
	}
	if _, ok := tx.fills[string(key)]; !ok {
		tx.fills[string(key)] = tx.newVal(hotVal{}) // the write (wrote) puts the value in
	}
}

// Delete removes key.
func (b *Bucket) Delete(key []byte) error { return b.remove(key, (*pebble.Batch).Delete) }

// deleteOnce removes key, which was set exactly once since it last did
// not exist (pebble's SingleDelete): an index entry whose key names its
// time or its run. Where the set is still in the memtable, the two
// vanish together when it is flushed; a Delete would leave a tombstone to
// be carried down the levels (and to trigger tombstone-density
// compactions). A key set twice must never get here: the older value
// would come back.
func (b *Bucket) deleteOnce(key []byte) error {
	return b.remove(key, (*pebble.Batch).SingleDelete)
}

// remove removes key from the transaction's batch with del.
func (b *Bucket) remove(key []byte, del func(*pebble.Batch, []byte, *pebble.WriteOptions) error) error {
	if b.tx.w == nil {
		return errReadOnly
	}
	k := b.leaf(key)
	b.tx.wrote(k, hotVal{}, false)
	return del(b.tx.w, k, nil)
}

// ForEach calls fn for each leaf of b in key order (not for child
// buckets). k and v are valid only during the call.
func (b *Bucket) ForEach(fn func(k, v []byte) error) error {
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return b.tx.err
}

// Cursor walks b's leaves. A key and value it returns are valid until the
// next move; writes made after the cursor opened are not seen.
func (b *Bucket) Cursor() *Cursor {
	lower := append(b.tx.alloc(len(b.prefix)+1), b.prefix...)
	lower = append(lower, tagLeaf)
	upper := append(b.tx.alloc(len(b.prefix)+1), b.prefix...)
	upper = append(upper, tagLeaf+1)
	it, err := b.tx.r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		b.tx.fail(err)
		return &Cursor{tx: b.tx, lower: lower}
	}
	b.tx.closers = append(b.tx.closers, it)
	return &Cursor{tx: b.tx, it: it, lower: lower}
}

// Cursor is an iterator over one bucket's leaves.
type Cursor struct {
	tx    *Tx
	it    *pebble.Iterator
	lower []byte // the bucket's leaf prefix
	seek  []byte
}

func (c *Cursor) at(ok bool) ([]byte, []byte) {
	if !ok {
		if err := c.it.Error(); err != nil {
			c.tx.fail(err)
		}
		return nil, nil
	}
	v, err := c.it.ValueAndErr()
	if err != nil {
		c.tx.fail(err)
		return nil, nil
	}
	if v == nil {
		v = []byte{}
	}
	return c.it.Key()[len(c.lower):], v
}

// First moves to the first leaf.
func (c *Cursor) First() ([]byte, []byte) {
	if c.it == nil {
		return nil, nil
	}
	return c.at(c.it.First())
}

// Seek moves to the first leaf at or after key.
func (c *Cursor) Seek(key []byte) ([]byte, []byte) {
	if c.it == nil {
		return nil, nil
	}
	c.seek = append(append(c.seek[:0], c.lower...), key...)
	return c.at(c.it.SeekGE(c.seek))
}

// Next moves to the next leaf.
func (c *Cursor) Next() ([]byte, []byte) {
	if c.it == nil {
		return nil, nil
	}
	return c.at(c.it.Next())
}

func (tx *Tx) get(key []byte) []byte {
	if tx.hot != nil {
		return tx.getHot(key)
	}
	v, closer, err := tx.r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		tx.fail(err)
		return nil
	}
	tx.closers = append(tx.closers, closer)
	if v == nil {
		v = []byte{}
	}
	return v
}

func (tx *Tx) set(key, value []byte) error { return tx.setOwned(key, value, false) }

// setOwned is set; owned says the transaction may keep value (a slice no
// one else holds or changes), so the hot cache need not copy it.
func (tx *Tx) setOwned(key, value []byte, owned bool) error {
	if tx.w == nil {
		return errReadOnly
	}
	tx.wrote(key, hotVal{v: value, ok: true}, owned)
	return tx.w.Set(key, value, nil)
}

// getHot is get in the committer: from this transaction's fills, the hot
// cache, or the batch (recorded in the fills).
func (tx *Tx) getHot(key []byte) []byte {
	p, ok := tx.fills[string(key)]
	var hv hotVal
	if ok {
		hv = *p
	} else {
		// A value found in the cache is recorded as read too, so that
		// a write of it keeps it cached (wrote) instead of dropping it.
		if hv, ok = tx.hot.get(key); !ok {
			tx.hot.misses++
			v, closer, err := tx.r.Get(key)
			switch {
			case errors.Is(err, pebble.ErrNotFound):
			case err != nil:
				tx.fail(err)
				return nil
			default:
				hv = hotVal{v: append([]byte{}, v...), ok: true}
				closer.Close()
			}
		}
		if tx.fills == nil {
			tx.fills = make(map[string]*hotVal, 8)
		}
		if hv.key != "" {
			tx.fills[hv.key] = tx.newVal(hv)
		} else {
			tx.fills[string(key)] = tx.newVal(hv)
		}
	}
	if !hv.ok {
		return nil
	}
	return hv.v
}

// wrote keeps the fills and the hot cache true to a write of key: a value
// this transaction read takes the written one, any other leaves the cache.
func (tx *Tx) wrote(key []byte, hv hotVal, owned bool) {
	if tx.hot == nil {
		return
	}
	if p, ok := tx.fills[string(key)]; ok {
		if hv.ok && !owned {
			hv.v = append([]byte{}, hv.v...)
		}
		*p = hv
		return
	}
	tx.hot.drop(key)
}

// prefixEnd is the first key after every key starting with p.
func prefixEnd(p []byte) []byte {
	end := append([]byte{}, p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
