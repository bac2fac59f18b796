package admin

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/embedded"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/google/go-cmp/cmp"
)

// backends are the stores the audit tests run against.
var backends = []struct {
	name string
	open func(t testing.TB) store.Store
}{
	{"embedded", func(t testing.TB) store.Store {
		st, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
	{"redis", func(t testing.TB) store.Store {
		srv := redistest.Start(t)
		st, err := redisstore.Open(context.Background(), redisstore.Options{URL: srv.URL()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}},
}

// seed writes a thread of msgs with one completed run straight through the
// store API.
func seed(t testing.TB, st store.Store, k store.Key, msgs ...string) {
	t.Helper()
	ctx := context.Background()
	started, err := st.StartRun(ctx, store.StartRun{Key: k, RunID: k.Thread + "-r0", Owner: "seed", TTL: time.Minute, Model: "gpt-4o"})
	if err != nil {
		t.Fatalf("seed %s: start: %v", k, err)
	}
	tr := &store.Transcript{Connection: "openai", Format: "openai-chat", Model: "gpt-4o"}
	for _, m := range msgs {
		sum := sha256.Sum256([]byte(m))
		var h store.Hash
		copy(h[:], sum[:])
		tr.Messages = append(tr.Messages, []byte(m))
		tr.Hashes = append(tr.Hashes, h)
	}
	if err := st.Finish(ctx, started.Lease, &store.Finish{Status: store.Completed, Model: "gpt-4o", Transcript: tr}); err != nil {
		t.Fatalf("seed %s: finish: %v", k, err)
	}
}

// TestAuditBoundedTextSearch: text search across pages, with a scan bound
// so small that pages come back short: following the cursor still finds
// every match, in the listing's order. (The HTTP side of the pagination is
// proxy's TestAdminPaginationToTheEnd.)
func TestAuditBoundedTextSearch(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t)
			const n = 57
			for i := 0; i < n; i++ {
				seed(t, st, store.Key{Tenant: fmt.Sprintf("t%d", i%3), Thread: fmt.Sprintf("th-%03d", i)},
					fmt.Sprintf(`{"role":"user","content":"msg %d %s"}`, i, map[bool]string{true: "needle", false: "hay"}[i%4 == 0]))
			}
			ctx := context.Background()
			one, err := NewAudit(st).List(ctx, AuditQuery{Limit: 500})
			if err != nil {
				t.Fatal(err)
			}
			if len(one.Threads) != n || one.NextCursor != nil {
				t.Fatalf("one page: %d threads, cursor %v", len(one.Threads), one.NextCursor)
			}
			var full []string
			for _, e := range one.Threads {
				full = append(full, e.Tenant+"/"+e.ID)
			}
			a := NewAudit(st)
			a.scanLimit = 3
			var found []string
			q := AuditQuery{Text: "NEEDLE", Limit: 2}
			for pages := 0; ; pages++ {
				pg, err := a.List(ctx, q)
				if err != nil {
					t.Fatal(err)
				}
				if len(pg.Threads) > 2 || pages > n {
					t.Fatalf("page of %d, %d pages", len(pg.Threads), pages)
				}
				for _, e := range pg.Threads {
					found = append(found, e.Tenant+"/"+e.ID)
				}
				if pg.NextCursor == nil {
					break
				}
				q.Cursor = *pg.NextCursor
			}
			var want []string
			for _, k := range full {
				var i int
				fmt.Sscanf(k[strings.Index(k, "th-")+3:], "%d", &i)
				if i%4 == 0 {
					want = append(want, k)
				}
			}
			if diff := cmp.Diff(want, found); diff != "" {
				t.Fatalf("bounded text search: -want +got\n%s", diff)
			}
		})
	}
}
