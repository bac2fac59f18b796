package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

func bigMessage(c byte, n int) ([]byte, store.Hash) {
	m := []byte(`{"role":"user","content":"` + strings.Repeat(string(c), n) + `"}`)
	return m, storetest.HashOf(m)
}

// openTemp opens a store in a new temporary directory, closed at the
// test's end.
func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// blobFiles returns the names in dir/blobs.
func blobFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, blobDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// dirBytes is the size of the files in dir.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		n += fi.Size()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// registered counts the blob bucket's names.
func registered(t *testing.T, s *Store) int {
	t.Helper()
	n := 0
	if err := s.view(func(tx *Tx) error { return tx.Bucket(bBlob).ForEach(func(_, _ []byte) error { n++; return nil }) }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestLargeValuesLiveInFiles: a message or body of blobMin bytes or more
// never enters the key space (the single writer would copy and sync it
// while every other write waits); it is a file of its own, and no file
// outlives its value: not after a refused write, a retried one, a rewrite,
// a delete, or a crash between writing a file and committing it.
func TestLargeValuesLiveInFiles(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	k := store.Key{Tenant: "t", Thread: "blobs"}
	want := func(what string, files int) {
		t.Helper()
		if got := blobFiles(t, dir); len(got) != files {
			t.Fatalf("%s: %d files %v, want %d", what, len(got), got, files)
		}
		if n := registered(t, s); n != files {
			t.Fatalf("%s: %d names registered, want %d", what, n, files)
		}
	}
	start := func(run string) store.Lease {
		t.Helper()
		st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: run, Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return st.Lease
	}
	load := func(what string, msgs ...[]byte) {
		t.Helper()
		th, err := s.LoadThread(ctx, k)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if len(th.Messages) != len(msgs) {
			t.Fatalf("%s: %d messages, want %d", what, len(th.Messages), len(msgs))
		}
		for i := range msgs {
			if !bytes.Equal(th.Messages[i], msgs[i]) {
				t.Fatalf("%s: message %d differs (%d bytes, want %d)", what, i, len(th.Messages[i]), len(msgs[i]))
			}
		}
	}

	small, smallH := storetest.Msgs(0, 3)
	big1, big1H := bigMessage('a', 3<<20)
	big2, big2H := bigMessage('b', blobMin)
	l := start("r1")
	tr := store.Transcript{Messages: [][]byte{small[0], big1, big2}, Hashes: []store.Hash{smallH[0], big1H, big2H}}
	if err := s.Finish(ctx, l, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	want("first turn", 2)
	load("first turn", small[0], big1, big2)
	if n := dirBytes(t, filepath.Join(dir, kvDir)); n >= 1<<20 {
		t.Fatalf("the key space holds %d bytes after 3 MB of messages", n)
	}

	// A retried finish stages its files again and keeps none of them.
	if err := s.Finish(ctx, l, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatalf("retried finish: %v", err)
	}
	want("retried finish", 2)

	// A stale lease's write is refused and leaves no file.
	big3, big3H := bigMessage('c', 1<<20)
	more := store.Transcript{Keep: 3, KeepHash: big2H, Messages: [][]byte{big3}, Hashes: []store.Hash{big3H}}
	if err := s.SaveTranscript(ctx, l, more); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("stale save: %v", err)
	}
	want("refused save", 2)

	// A rewrite of the tail removes the files of what it replaced; a small
	// response that begins with \x00 goes to a file, so that a row
	// beginning with \x00 is always a reference.
	l = start("r2")
	tr = store.Transcript{Keep: 1, KeepHash: smallH[0], Messages: [][]byte{big3, small[1]}, Hashes: []store.Hash{big3H, smallH[1]}}
	resp, up := []byte("\x00not json"), bytes.Repeat([]byte("u"), blobMin+1)
	if err := s.Finish(ctx, l, &store.Finish{Status: store.Completed, Transcript: &tr, Response: resp, UpstreamBody: up}); err != nil {
		t.Fatal(err)
	}
	want("rewritten tail", 3)
	load("rewritten tail", small[0], big3, small[1])
	run, err := s.GetRun(ctx, k, "r2")
	if err != nil || !bytes.Equal(run.Response, resp) || !bytes.Equal(run.UpstreamBody, up) {
		t.Fatalf("run bodies: response %q, upstream %d bytes (%v)", run.Response, len(run.UpstreamBody), err)
	}
	st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r3", Owner: "o", TTL: time.Minute, LoadThread: true})
	if err != nil || len(st.Thread.Messages) != 3 || !bytes.Equal(st.Thread.Messages[1], big3) {
		t.Fatalf("start with load: %d messages (%v)", len(st.Thread.Messages), err)
	}
	if err := s.Release(ctx, st.Lease); err != nil {
		t.Fatal(err)
	}

	// A file nothing refers to (a crash after writing it, before its
	// commit) is gone after the next Open; the others stay.
	orphan := filepath.Join(dir, blobDir, "ORPHAN")
	if err := os.WriteFile(orphan, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("orphan file after reopen: %v", err)
	}
	want("reopened", 3)
	load("reopened", small[0], big3, small[1])

	if err := s.DeleteThread(ctx, k); err != nil {
		t.Fatal(err)
	}
	want("deleted", 0)
}

// TestReadAfterFileRemoved: a reader whose snapshot still refers to a file
// that a later commit removed reads again and gets the thread as it is now.
func TestReadAfterFileRemoved(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	k := store.Key{Tenant: "t", Thread: "gone"}
	big, bigH := bigMessage('a', blobMin)
	small, smallH := storetest.Msgs(0, 1)
	finish := func(run string, msg []byte, h store.Hash) {
		t.Helper()
		st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: run, Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		tr := store.Transcript{Messages: [][]byte{msg}, Hashes: []store.Hash{h}}
		if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
			t.Fatal(err)
		}
	}
	finish("r1", big, bigH)

	var snapshot store.Thread
	if err := s.view(func(tx *Tx) error {
		var err error
		snapshot, _, err = readThread(tx, k, nil, true)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	finish("r2", small[0], smallH[0]) // drops the big message's file
	if err := s.loadAll(snapshot.Messages); !errors.Is(err, errBlobGone) {
		t.Fatalf("loading a removed file: %v, want errBlobGone", err)
	}

	reads := 0
	err := readAgain(func() error {
		if reads++; reads < 3 {
			return errBlobGone
		}
		return nil
	})
	if err != nil || reads != 3 {
		t.Fatalf("readAgain: %v after %d reads", err, reads)
	}
	if th, err := s.LoadThread(ctx, k); err != nil || !bytes.Equal(th.Messages[0], small[0]) {
		t.Fatalf("load after the rewrite: %v", err)
	}
}

// TestSystemKeptApart: the system blob has a key of its own, so the meta
// that every start, renewal and finish rewrites stays small; a thread
// written with the system in its meta (before the key existed) reads the
// same and moves it on its next transcript write.
func TestSystemKeptApart(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	k := store.Key{Tenant: "t", Thread: "sys"}
	msgs, hashes := storetest.Msgs(0, 2)
	big := []byte(`{"parts":[{"text":"` + strings.Repeat("s", 300<<10) + `"}]}`)
	metaOf := func() (threadMeta, []byte) {
		t.Helper()
		var m threadMeta
		var raw, sys []byte
		if err := s.view(func(tx *Tx) error {
			tb := threadBucket(tx, k)
			raw = append(raw, tb.Get(kMeta)...)
			sys = append(sys, tb.Get(kSys)...)
			return json.Unmarshal(raw, &m)
		}); err != nil {
			t.Fatal(err)
		}
		if len(raw) > 1024 {
			t.Fatalf("meta is %d bytes", len(raw))
		}
		return m, sys
	}
	turn := func(run string, keep int, system []byte, msgs [][]byte, hashes []store.Hash) {
		t.Helper()
		st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: run, Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		tr := store.Transcript{Keep: keep, Messages: msgs[keep:], Hashes: hashes[keep:], System: system}
		if keep > 0 {
			tr.KeepHash = hashes[keep-1]
		}
		if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
			t.Fatal(err)
		}
	}
	wantSystem := func(what string, want []byte) {
		t.Helper()
		th, err := s.LoadThread(ctx, k)
		if err != nil || !bytes.Equal(th.System, want) {
			t.Fatalf("%s: system of %d bytes, want %d (%v)", what, len(th.System), len(want), err)
		}
	}

	turn("r1", 0, big, msgs[:1], hashes[:1])
	if m, sys := metaOf(); m.System != nil || !bytes.Equal(sys, big) {
		t.Fatalf("first turn: meta holds %d bytes of system, key %d", len(m.System), len(sys))
	}
	wantSystem("first turn", big)

	// A thread as an older binary wrote it: the system in the meta.
	if err := s.update(func(tx *Tx) error {
		tb := threadBucket(tx, k)
		m, err := loadMeta(tb)
		if err != nil {
			return err
		}
		m.System = []byte(`{"parts":[{"text":"old"}]}`)
		if err := tb.Delete(kSys); err != nil {
			return err
		}
		return putJSON(tb, kMeta, &m)
	}); err != nil {
		t.Fatal(err)
	}
	wantSystem("old layout", []byte(`{"parts":[{"text":"old"}]}`))
	turn("r2", 1, big, msgs, hashes)
	if m, sys := metaOf(); m.System != nil || !bytes.Equal(sys, big) {
		t.Fatalf("moved: meta holds %d bytes of system, key %d", len(m.System), len(sys))
	}
	wantSystem("moved", big)

	// Cleared.
	turn("r3", 2, nil, msgs, hashes)
	if _, sys := metaOf(); sys != nil {
		t.Fatalf("cleared: key holds %d bytes", len(sys))
	}
	wantSystem("cleared", nil)
}

// TestReadsDuringRewrites: readers racing rewrites that replace a large
// message (and remove its file) always get one whole version of the
// thread, never an error: a read whose file went away reads again.
func TestReadsDuringRewrites(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	k := store.Key{Tenant: "t", Thread: "race"}
	a, aH := bigMessage('a', blobMin)
	b, bH := bigMessage('b', blobMin+1)
	write := func(i int) {
		msg, h := a, aH
		if i%2 == 1 {
			msg, h = b, bH
		}
		st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r" + strconv.Itoa(i), Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Error(err)
			return
		}
		tr := store.Transcript{Messages: [][]byte{msg}, Hashes: []store.Hash{h}}
		if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
			t.Error(err)
		}
	}
	write(0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= 150; i++ {
			write(i)
		}
	}()
	reads := 0
	for stop := false; !stop; {
		select {
		case <-done:
			stop = true
		default:
		}
		th, err := s.LoadThread(ctx, k)
		if err != nil {
			t.Fatalf("read %d during rewrites: %v", reads, err)
		}
		if len(th.Messages) != 1 || !(bytes.Equal(th.Messages[0], a) || bytes.Equal(th.Messages[0], b)) {
			t.Fatalf("read %d: %d messages, not one whole version", reads, len(th.Messages))
		}
		reads++
	}
	if n := len(blobFiles(t, filepath.Dir(s.blobDir))); n != 1 {
		t.Fatalf("%d files after the rewrites, want 1", n)
	}
}

// TestStartReleasesWhenFileUnreadable: a start whose large message cannot
// be read fails, and leaves the thread free for the next start rather than
// held by a lease its caller never got.
func TestStartReleasesWhenFileUnreadable(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	k := store.Key{Tenant: "t", Thread: "unreadable"}
	big, bigH := bigMessage('a', blobMin)
	st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r1", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	tr := store.Transcript{Messages: [][]byte{big}, Hashes: []store.Hash{bigH}}
	if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
		t.Fatal(err)
	}
	// The file becomes a directory: reading it fails with EISDIR, not as
	// a file removed by a rewrite.
	names := blobFiles(t, filepath.Dir(s.blobDir))
	if len(names) != 1 {
		t.Fatalf("%d files", len(names))
	}
	file := filepath.Join(s.blobDir, names[0])
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(file, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r2", Owner: "o", TTL: time.Minute, LoadThread: true}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("start over an unreadable file: %v, want ErrUnavailable", err)
	}
	if _, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r3", Owner: "o", TTL: time.Minute}); err != nil {
		t.Fatalf("next start on the thread: %v", err)
	}
}
