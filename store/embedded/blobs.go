package embedded

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/chronicle-proxy/chronicle/store"
)

// Large values live in files of their own, beside the key space, so that
// the single writer never copies, writes or syncs them: a 10 MB message in
// the transaction held every other write of the group commit (small
// streams' run records among them) behind its pwrite and fdatasync.
//
// A message, response body or upstream body of blobMin bytes or more is
// written to blobs/<name> and synced by the caller's own goroutine before
// its transaction is queued; the row then holds a reference, "\x00" and the
// name, and the blob bucket registers the name with its thread. A value
// that itself begins with \x00 goes to a file whatever its size, so a row
// that begins with \x00 is always a reference (JSON never does).
//
// Files go away only after the transaction that drops their reference has
// committed (a rewrite of the transcript's tail, DeleteThread). A reader
// whose snapshot still held the reference then finds no file and reads
// again (errBlobGone). A file with no registered name is what a crash left
// between writing a file and committing its reference; Open removes it.
const blobMin = 128 << 10

const blobDir = "blobs"

var bBlob = []byte("blob")

var errBlobGone = errors.New("embedded: a large value's file was removed after the read began")

func isRef(v []byte) bool { return len(v) > 0 && v[0] == 0 }

// stagedBlob is a file written for a write that has not committed yet.
type stagedBlob struct {
	name string
	used bool
}

// blobWrite carries one write's files: those it staged before its
// transaction, and those its transaction stopped referencing.
type blobWrite struct {
	dir     string
	staged  []stagedBlob
	dropped []string
}

func (s *Store) blobWrite() *blobWrite { return &blobWrite{dir: s.blobDir} }

func needsFile(v []byte) bool { return len(v) >= blobMin || isRef(v) }

// put returns what a row holds for v: v itself, or a reference to a new,
// synced file holding v. The directory is synced by sync.
func (w *blobWrite) put(v []byte) ([]byte, error) {
	if !needsFile(v) {
		return v, nil
	}
	name := rand.Text()
	f, err := os.OpenFile(filepath.Join(w.dir, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, unavailable(err)
	}
	w.staged = append(w.staged, stagedBlob{name: name})
	err = writeSynced(f, v)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, unavailable(err)
	}
	return append([]byte{0}, name...), nil
}

// transcript stages t's large messages and returns t as the rows hold it:
// t itself when it has none, else a copy whose large messages are
// references. The caller syncs the files' names (sync).
func (w *blobWrite) transcript(t *store.Transcript) (*store.Transcript, error) {
	if t == nil {
		return nil, nil
	}
	var msgs [][]byte
	for i, msg := range t.Messages {
		if !needsFile(msg) {
			continue
		}
		if msgs == nil {
			msgs = slices.Clone(t.Messages)
		}
		ref, err := w.put(msg)
		if err != nil {
			return nil, err
		}
		msgs[i] = ref
	}
	if msgs == nil {
		return t, nil
	}
	out := *t
	out.Messages = msgs
	return &out, nil
}

// blobSyncStep is how much of a large value is written before it is
// synced: the device then never holds more than this of it ahead of a
// concurrent commit's fdatasync. Measured on the bench machine beside 4 KiB
// pwrite+fdatasync commits, a 10 MB file synced once made them wait up to
// 7–10 ms (p99 5–6 ms); synced every MiB, up to 3 ms (p99 1.9 ms), with
// the large files written as fast.
const blobSyncStep = 1 << 20

func writeSynced(f *os.File, v []byte) error {
	for len(v) > 0 {
		n := min(len(v), blobSyncStep)
		if _, err := f.Write(v[:n]); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		v = v[n:]
	}
	return nil
}

// sync makes the staged files' names durable, before a transaction that
// refers to them commits.
func (w *blobWrite) sync() error {
	if len(w.staged) == 0 {
		return nil
	}
	if err := syncDir(w.dir); err != nil {
		return unavailable(err)
	}
	return nil
}

// begin starts (or restarts: an op may run more than once) the write's
// transaction.
func (w *blobWrite) begin() {
	for i := range w.staged {
		w.staged[i].used = false
	}
	w.dropped = w.dropped[:0]
}

// use registers the file a stored value refers to, if it does, for thread.
func (w *blobWrite) use(tx *Tx, v, thread []byte) error {
	if !isRef(v) {
		return nil
	}
	name := string(v[1:])
	for i := range w.staged {
		if w.staged[i].name == name {
			w.staged[i].used = true
		}
	}
	return tx.Bucket(bBlob).Put(v[1:], thread)
}

// drop unregisters the file a value about to be deleted or overwritten
// refers to; the file is removed once the transaction has committed.
func (w *blobWrite) drop(tx *Tx, v []byte) error {
	if !isRef(v) {
		return nil
	}
	w.dropped = append(w.dropped, string(v[1:]))
	return tx.Bucket(bBlob).Delete(v[1:])
}

// end removes the files the write no longer needs: after a commit, those it
// dropped and those it staged but did not store (a refused or already
// applied write); after a failed one, everything it staged.
func (w *blobWrite) end(err error) {
	for _, b := range w.staged {
		if err != nil || !b.used {
			os.Remove(filepath.Join(w.dir, b.name))
		}
	}
	if err == nil {
		for _, name := range w.dropped {
			os.Remove(filepath.Join(w.dir, name))
		}
	}
}

// dropAll unregisters every file the values of b refer to, skipping the
// first skip bytes of each value (a message's hash).
func (w *blobWrite) dropAll(tx *Tx, b *Bucket, skip int) error {
	if b == nil {
		return nil
	}
	return b.ForEach(func(_, v []byte) error {
		if len(v) < skip {
			return nil
		}
		return w.drop(tx, v[skip:])
	})
}

// load returns the value a row holds: v itself, or its file's contents.
func (s *Store) load(v []byte) ([]byte, error) {
	if !isRef(v) {
		return v, nil
	}
	b, err := os.ReadFile(filepath.Join(s.blobDir, string(v[1:])))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errBlobGone
	}
	if err != nil {
		return nil, unavailable(err)
	}
	return b, nil
}

// loadAll replaces every reference in vs with its file's contents.
func (s *Store) loadAll(vs [][]byte) error {
	for i, v := range vs {
		b, err := s.load(v)
		if err != nil {
			return err
		}
		vs[i] = b
	}
	return nil
}

// readAgain runs read until it does not meet a file removed after its
// snapshot: each retry starts after the removing commit, so it sees the
// value's new state.
func readAgain(read func() error) error {
	for range 8 {
		if err := read(); !errors.Is(err, errBlobGone) {
			return err
		}
	}
	return unavailable(errBlobGone)
}

// sweepBlobs removes files that no row refers to: what a crash left between
// writing a file and committing its reference. It runs at Open, before any
// write can stage a file.
func (s *Store) sweepBlobs() error {
	entries, err := os.ReadDir(s.blobDir)
	if err != nil {
		return err
	}
	removed := false
	err = s.view(func(tx *Tx) error {
		reg := tx.Bucket(bBlob)
		for _, e := range entries {
			if reg.Get([]byte(e.Name())) != nil {
				continue
			}
			if err := os.Remove(filepath.Join(s.blobDir, e.Name())); err != nil {
				return err
			}
			removed = true
		}
		return nil
	})
	if err == nil && removed {
		err = syncDir(s.blobDir)
	}
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
