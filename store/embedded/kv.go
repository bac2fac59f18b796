package embedded

import (
	"encoding/binary"
	"errors"
	"io"

	"github.com/cockroachdb/pebble/v2"
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
	// made: a step asks for its thread's bucket several times.
	markers map[string]bool
	// hot is the committer's cache (nil in a read); fills are the values
	// this transaction read, as its own writes left them (hot.go).
	hot   *hotCache
	fills map[string]hotVal
	err   error // the first failure of a read that had no error to return
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
	return &Bucket{tx: tx, prefix: childPrefix(nil, name), marked: string(name) == string(bThreads)}
}

// Bucket is a key prefix inside a transaction.
type Bucket struct {
	tx     *Tx
	prefix []byte
	marked bool // children exist only with their marker
}

func childPrefix(parent, name []byte) []byte {
	p := make([]byte, 0, len(parent)+1+binary.MaxVarintLen32+len(name))
	p = append(p, parent...)
	p = append(p, tagBucket)
	p = binary.AppendUvarint(p, uint64(len(name)))
	return append(p, name...)
}

func (b *Bucket) leaf(key []byte) []byte {
	k := make([]byte, 0, len(b.prefix)+1+len(key))
	k = append(append(k, b.prefix...), tagLeaf)
	return append(k, key...)
}

// Bucket opens the child bucket name: nil when b's children are marked and
// name's marker is absent.
func (b *Bucket) Bucket(name []byte) *Bucket {
	c := &Bucket{tx: b.tx, prefix: childPrefix(b.prefix, name)}
	if b.marked && !b.tx.marked(c.prefix) {
		return nil
	}
	return c
}

func (tx *Tx) marked(prefix []byte) bool {
	if ok, seen := tx.markers[string(prefix)]; seen {
		return ok
	}
	ok := tx.get(prefix) != nil
	if tx.markers == nil {
		tx.markers = make(map[string]bool, 4)
	}
	tx.markers[string(prefix)] = ok
	return ok
}

// CreateBucketIfNotExists opens the child bucket name, writing its marker
// when b's children are marked.
func (b *Bucket) CreateBucketIfNotExists(name []byte) (*Bucket, error) {
	c := &Bucket{tx: b.tx, prefix: childPrefix(b.prefix, name)}
	if b.marked && !b.tx.marked(c.prefix) {
		if err := b.tx.set(c.prefix, nil); err != nil {
			return nil, err
		}
		b.tx.markers[string(c.prefix)] = true
	}
	return c, b.tx.err
}

// DeleteBucket removes the child bucket name and everything under it.
func (b *Bucket) DeleteBucket(name []byte) error {
	p := childPrefix(b.prefix, name)
	if b.tx.w == nil {
		return errReadOnly
	}
	delete(b.tx.markers, string(p))
	if b.tx.hot != nil {
		for k := range b.tx.fills {
			if len(k) >= len(p) && k[:len(p)] == string(p) {
				b.tx.fills[k] = hotVal{}
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

// Put sets key to value.
func (b *Bucket) Put(key, value []byte) error { return b.tx.set(b.leaf(key), value) }

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
		tx.fills = make(map[string]hotVal, 8)
	}
	if _, ok := tx.fills[string(key)]; !ok {
		tx.fills[string(key)] = hotVal{} // the write (wrote) puts the value in
	}
}

// Delete removes key.
func (b *Bucket) Delete(key []byte) error {
	if b.tx.w == nil {
		return errReadOnly
	}
	k := b.leaf(key)
	b.tx.wrote(k, hotVal{})
	return b.tx.w.Delete(k, nil)
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
	lower := append(append([]byte{}, b.prefix...), tagLeaf)
	upper := append(append([]byte{}, b.prefix...), tagLeaf+1)
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

func (tx *Tx) set(key, value []byte) error {
	if tx.w == nil {
		return errReadOnly
	}
	tx.wrote(key, hotVal{v: value, ok: true})
	return tx.w.Set(key, value, nil)
}

// getHot is get in the committer: from this transaction's fills, the hot
// cache, or the batch (recorded in the fills).
func (tx *Tx) getHot(key []byte) []byte {
	hv, ok := tx.fills[string(key)]
	if !ok {
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
			tx.fills = make(map[string]hotVal, 8)
		}
		tx.fills[string(key)] = hv
	}
	if !hv.ok {
		return nil
	}
	return hv.v
}

// wrote keeps the fills and the hot cache true to a write of key: a value
// this transaction read takes the written one, any other leaves the cache.
func (tx *Tx) wrote(key []byte, hv hotVal) {
	if tx.hot == nil {
		return
	}
	if _, ok := tx.fills[string(key)]; ok {
		if hv.ok {
			hv.v = append([]byte{}, hv.v...)
		}
		tx.fills[string(key)] = hv
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
