package embedded

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

// filesWith lists the files under dir whose bytes contain marker.
func filesWith(t *testing.T, dir, marker string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(marker)) {
			out = append(out, strings.TrimPrefix(path, dir))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestErasureBelowKeyLevel: after a thread is deleted, its content is
// still in pebble's files (the write-ahead log, table files) until a
// compaction drops it; CompactDeleted flushes and compacts, and then no
// file of the store's directory holds it.
func TestErasureBelowKeyLevel(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	// Distinctive and without repeats, so that snappy keeps each one's
	// first occurrence in a table file literal (a later one can be a
	// back-reference).
	const marker, keptMarker = "Qj7Wz2Xv9Kp4Rm8Tn3Ys", "Hb5Lc1Fg6Dq0Ua3Ve9Po"
	k := store.Key{Tenant: "t", Thread: "gone"}
	keep := store.Key{Tenant: "t", Thread: "kept"}
	for _, kk := range []store.Key{k, keep} {
		started, err := s.StartRun(ctx, store.StartRun{Key: kk, RunID: kk.Thread + "-r", Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		m := []byte(`{"role":"user","content":"` + marker + `"}`)
		if kk == keep {
			m = []byte(`{"role":"user","content":"` + keptMarker + `"}`)
		}
		tr := store.Transcript{Messages: [][]byte{m}, Hashes: []store.Hash{{1}}}
		if err := s.Finish(ctx, started.Lease, &store.Finish{Status: store.Completed, Transcript: &tr, Response: m}); err != nil {
			t.Fatal(err)
		}
	}
	// Flushed into a table file too, as an older thread's would be.
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := filesWith(t, dir, marker); len(got) == 0 {
		t.Fatal("the marker is in no file before the delete: the scan proves nothing")
	}
	if err := s.DeleteThread(ctx, k); err != nil {
		t.Fatal(err)
	}
	before := filesWith(t, dir, marker)
	if len(before) == 0 {
		t.Fatal("deleted values vanished from the files without a compaction; the documentation says otherwise")
	}
	t.Logf("after the delete, before compaction, the marker is in %v", before)
	if err := s.CompactDeleted(ctx); err != nil {
		t.Fatal(err)
	}
	if got := filesWith(t, dir, marker); len(got) > 0 {
		t.Fatalf("after CompactDeleted the marker is still in %v (live tables %v)", got, liveTables(t, s))
	}
	if got := filesWith(t, dir, keptMarker); len(got) == 0 {
		t.Fatal("the kept thread is in no file either: the scan proves nothing")
	}
}

func liveTables(t *testing.T, s *Store) []string {
	t.Helper()
	levels, err := s.db.SSTables()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for l, ts := range levels {
		for _, ti := range ts {
			out = append(out, fmt.Sprintf("L%d:%s", l, ti.FileNum))
		}
	}
	return out
}
