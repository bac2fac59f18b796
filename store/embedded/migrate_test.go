package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/chronicle-proxy/chronicle/store"
)

// TestMigrateFromBbolt opens a directory that a chronicle before pebble
// wrote (testdata/legacy-bbolt/chronicle.db, made by the bbolt store with
// testdata/legacy-bbolt/mklegacy) and reads back every key, thread, run,
// event and session id that store read from it; the bbolt file stays as a
// backup and is not copied again. A copy cut short by a crash (a
// kv.migrating left behind) starts over.
func TestMigrateFromBbolt(t *testing.T) {
	want, err := os.ReadFile("testdata/legacy-bbolt/summary.json")
	if err != nil {
		t.Fatal(err)
	}
	legacy, err := os.ReadFile("testdata/legacy-bbolt/chronicle.db")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup func(dir string) error
	}{
		{"fresh", func(string) error { return nil }},
		{"copy cut short", func(dir string) error {
			return os.WriteFile(filepath.Join(dir, kvDir+".migrating"), []byte("half a copy"), 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, legacyFile), legacy, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := tc.setup(dir); err != nil {
				t.Fatal(err)
			}
			for open := range 2 {
				s, err := Open(dir, Options{})
				if err != nil {
					t.Fatalf("open %d: %v", open, err)
				}
				got, err := summarize(context.Background(), s)
				s.Close()
				if err != nil {
					t.Fatal(err)
				}
				var w, g any
				if err := json.Unmarshal(want, &w); err != nil {
					t.Fatal(err)
				}
				if err := json.Unmarshal(got, &g); err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(w, g); d != "" {
					t.Fatalf("open %d: the migrated store differs from the bbolt one (-bbolt +pebble):\n%s", open, d)
				}
				if _, err := os.Stat(filepath.Join(dir, legacyFile)); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("open %d: %s is still there (%v)", open, legacyFile, err)
				}
				if b, err := os.ReadFile(filepath.Join(dir, legacyFile+".migrated")); err != nil || len(b) != len(legacy) {
					t.Fatalf("open %d: the backup holds %d bytes of %d (%v)", open, len(b), len(legacy), err)
				}
			}
		})
	}
}

// summarize is what the migration test compares: every key, thread and
// run (testdata/legacy-bbolt/summary.json is its output from the bbolt
// store, made by testdata/legacy-bbolt/mklegacy).
func summarize(ctx context.Context, s *Store) ([]byte, error) {
	type run struct {
		ID, Status string
		Events     int64
	}
	type thread struct {
		Key      store.Key
		System   string
		Messages []string
		Version  int64
		Runs     []run
		Events   []string
	}
	var out struct {
		Keys    []string
		Threads []thread
		Session string
		Tenants []string
	}
	keys, err := s.DebugKeys(ctx)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		out.Keys = append(out.Keys, strconv.Quote(k))
	}
	sort.Strings(out.Keys)
	page, err := s.ListThreads(ctx, store.ThreadQuery{})
	if err != nil {
		return nil, err
	}
	for _, sum := range page.Threads {
		th, err := s.LoadThread(ctx, sum.Key)
		if err != nil {
			return nil, err
		}
		t := thread{Key: sum.Key, System: string(th.System), Version: th.Version}
		for _, m := range th.Messages {
			t.Messages = append(t.Messages, string(m))
		}
		runs, err := s.ListRuns(ctx, sum.Key)
		if err != nil {
			return nil, err
		}
		for _, r := range runs {
			t.Runs = append(t.Runs, run{ID: r.ID, Status: string(r.Status), Events: r.Events})
			// What is stored now, not what a running run will add.
			now, cancel := context.WithCancel(ctx)
			cancel()
			err := s.FollowEvents(now, sum.Key, r.ID, 0, func(e store.Event) error {
				t.Events = append(t.Events, string(e.Data))
				return nil
			})
			if err != nil && !errors.Is(err, context.Canceled) {
				return nil, err
			}
		}
		out.Threads = append(out.Threads, t)
	}
	if out.Session, err = s.SessionID(ctx, "openai", "gpt-4o", "other"); err != nil {
		return nil, err
	}
	if out.Tenants, err = s.ListTenants(ctx); err != nil {
		return nil, err
	}
	return json.MarshalIndent(out, "", "  ")
}
