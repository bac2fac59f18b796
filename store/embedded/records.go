package embedded

import (
	"encoding/json"
	"unicode/utf8"
)

// The committer keeps the thread meta and run records it reads and writes
// decoded, next to their bytes in the hot cache (hotVal.dec): a turn's
// start and finish each read and rewrite the meta, and the finish reads
// the run its start wrote, so without it every step decodes them again.
// A step gets a copy (its changes reach the cache only through its own
// writes, which enter it after the commit, like every fill); every write
// of a key through Tx.set or Delete resets its decoded form, and putRec
// sets it only to a record that decodes from the written bytes to equal
// itself (roundTrips), and its own copy of what it points to (own). A
// step's copy is shallow: no step changes a byte slice or pointed-to
// value of a record in place, it assigns new ones, and a record handed
// to a caller is owned first (startedBefore).

// record is a JSON record the committer keeps decoded.
type record interface {
	threadMeta | runRec
}

// getRec reads the JSON record at key into v.
func getRec[T record](b *Bucket, key []byte, v *T) (bool, error) {
	tx := b.tx
	if tx.hot == nil {
		return getJSON(b, key, v)
	}
	k := b.leaf(key)
	raw := tx.getHot(k)
	if raw == nil {
		return false, tx.err
	}
	hv := tx.fills[string(k)] // getHot recorded it
	if d, ok := hv.dec.(*T); ok {
		*v = *d
		return true, nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return true, err
	}
	d := new(T)
	*d = *v
	hv.dec = d
	return true, nil
}

// putRec writes v as JSON at key.
func putRec[T record](b *Bucket, key []byte, v *T) error {
	var raw []byte
	switch r := any(v).(type) {
	case *threadMeta:
		raw = appendMetaJSON(make([]byte, 0, 256), r)
	case *runRec:
		raw = appendRunJSON(make([]byte, 0, 256), r)
	}
	k := b.leaf(key)
	if err := b.tx.setOwned(k, raw, true); err != nil {
		return err
	}
	if hv, ok := b.tx.fills[string(k)]; ok && b.tx.hot != nil && roundTrips(v) {
		d := new(T)
		*d = *v
		own(d) // v may hold the caller's slices (store.Finish is never kept)
		hv.dec = d
	}
	return nil
}

// own gives v copies of the byte slices and values it points to.
func own[T record](v *T) {
	switch r := any(v).(type) {
	case *threadMeta:
		r.System = clone(r.System)
	case *runRec:
		r.Error, r.InterruptedCalls, r.Repairs = clone(r.Error), clone(r.InterruptedCalls), clone(r.Repairs)
		r.Restored, r.Partial, r.Redactions = clone(r.Restored), clone(r.Partial), clone(r.Redactions)
		if r.Usage != nil {
			u := *r.Usage
			r.Usage = &u
		}
		if r.SessionID != nil {
			sid := *r.SessionID
			r.SessionID = &sid
		}
	}
}

// roundTrips reports whether v decodes from its JSON to equal itself: no
// empty non-nil byte slice (omitempty leaves it out: it decodes as nil)
// and no string that is not valid UTF-8 (encoding replaces the bytes).
func roundTrips[T record](v *T) bool {
	switch r := any(v).(type) {
	case *threadMeta:
		return nonEmpty(r.System) && validUTF8(r.Connection, r.Format, r.Model, r.LeaseRun, r.LeaseOwner,
			string(r.LastStatus), r.ForkParent, r.ForkRun, r.Digest)
	case *runRec:
		sid := ""
		if r.SessionID != nil {
			sid = *r.SessionID
		}
		return nonEmpty(r.Error, r.InterruptedCalls, r.Repairs, r.Restored, r.Partial, r.Redactions) &&
			validUTF8(string(r.Status), r.Reason, r.Model, sid, r.LeaseOwner, r.ResumedBy, r.Fingerprint)
	}
	return false
}

func nonEmpty(bs ...[]byte) bool {
	for _, b := range bs {
		if b != nil && len(b) == 0 {
			return false
		}
	}
	return true
}

func validUTF8(ss ...string) bool {
	for _, s := range ss {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

func loadMeta(tb *Bucket) (threadMeta, error) {
	var m threadMeta
	_, err := getRec(tb, kMeta, &m)
	return m, err
}

func putMeta(tb *Bucket, m *threadMeta) error { return putRec(tb, kMeta, m) }

func getRun(tb *Bucket, id string) (*runRec, error) {
	var r runRec
	ok, err := getRec(tb.Bucket(bRuns), []byte(id), &r)
	if err != nil || !ok {
		return nil, err
	}
	return &r, nil
}

func putRun(tb *Bucket, id string, r *runRec) error { return putRec(tb.Bucket(bRuns), []byte(id), r) }

// putNewRun writes the run record a start makes; it stays cached for the
// run's finish (asRead).
func putNewRun(tb *Bucket, id string, r *runRec) error {
	b := tb.Bucket(bRuns)
	b.tx.asRead(b.leaf([]byte(id)))
	return putRec(b, []byte(id), r)
}
