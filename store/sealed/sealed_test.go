package sealed_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/embedded"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/chronicle-proxy/chronicle/store/sealed"
	"github.com/chronicle-proxy/chronicle/store/spool"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

func kek(t testing.TB, id string) sealed.KEK {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return sealed.KEK{ID: id, Key: k}
}

func openEmbedded(t testing.TB, dir string, now func() time.Time) *embedded.Store {
	t.Helper()
	st, err := embedded.Open(dir, embedded.Options{Now: now, NoSync: true, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func wrap(t testing.TB, backend store.Store, current sealed.KEK, previous ...sealed.KEK) store.Store {
	t.Helper()
	ring, err := sealed.NewKeyring(backend.(store.Keys), current, previous...)
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	return sealed.Wrap(backend, ring, sealed.Options{})
}

// listed lists the backend's keys but its data keys (which outlive the
// threads: the tenant's erasure deletes them), for the suite's check that
// a delete leaves nothing behind.
type listed struct {
	store.Store
	be storetest.KeyLister
}

// Unwrap lets store.As find the backend's optional interfaces (Erasure).
func (l listed) Unwrap() store.Store { return l.Store }

func (l listed) DebugKeys(ctx context.Context) ([]string, error) {
	keys, err := l.be.DebugKeys(ctx)
	var out []string
	for _, k := range keys {
		if !strings.HasPrefix(k, "keys/") && !strings.HasSuffix(k, "}:keys") && !strings.HasSuffix(k, "keytenants") {
			out = append(out, k)
		}
	}
	return out, err
}

// TestConformance: the wrapper keeps the store contract (a retried write
// changes nothing, system blobs compare, fingerprints conflict) on both
// backends.
func TestConformance(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		storetest.RunTests(t, func(t testing.TB, now func() time.Time) store.Store {
			be := openEmbedded(t, t.TempDir(), now)
			return listed{wrap(t, be, kek(t, "k1")), be}
		})
	})
	t.Run("redis", func(t *testing.T) {
		storetest.RunTests(t, func(t testing.TB, now func() time.Time) store.Store {
			srv := redistest.Start(t)
			st, err := redisstore.Open(context.Background(), redisstore.Options{URL: srv.URL(), Now: now})
			if err != nil {
				t.Fatal(err)
			}
			return listed{wrap(t, st, kek(t, "k1")), st}
		})
	})
}

const marker = "MARKER-a1b2c3-secret-content"

// fill writes one turn of every content-bearing kind holding the marker.
func fill(t *testing.T, st store.Store, k store.Key, run string) {
	t.Helper()
	ctx := context.Background()
	started, err := st.StartRun(ctx, store.StartRun{Key: k, RunID: run, Owner: "r", TTL: time.Minute, Fingerprint: "fp-" + marker})
	if err != nil {
		t.Fatal(err)
	}
	l := started.Lease
	msgs := [][]byte{[]byte(`{"role":"user","content":"` + marker + ` one"}`), bytes.Repeat([]byte(marker), 200<<10/len(marker))}
	hashes := []store.Hash{storetest.HashOf(msgs[0]), storetest.HashOf(msgs[1])}
	if err := st.SaveTranscript(ctx, l, store.Transcript{Messages: msgs, Hashes: hashes, System: []byte(`"` + marker + ` system"`), Digest: store.Digest(hashes)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Renew(ctx, l, store.RunPatch{Partial: []byte(marker + " partial")}); err != nil {
		t.Fatal(err)
	}
	if err := st.AppendEvents(ctx, l, 1, [][]byte{[]byte("data: " + marker + " event 1")}); err != nil {
		t.Fatal(err)
	}
	reply := []byte(`{"role":"assistant","content":"` + marker + ` reply"}`)
	all := append(append([][]byte{}, msgs...), reply)
	allH := append(append([]store.Hash{}, hashes...), storetest.HashOf(reply))
	tr := store.Diff(hashes, all, allH)
	tr.System = []byte(`"` + marker + ` system"`)
	if err := st.Finish(ctx, l, &store.Finish{Status: store.Completed, Transcript: &tr,
		Response: bytes.Repeat([]byte(marker), 150<<10/len(marker)), UpstreamBody: []byte(marker + " upstream"),
		Repairs: []byte(`["` + marker + `"]`), Restored: []byte(`["` + marker + `"]`), InterruptedCalls: []byte(`["` + marker + `"]`),
		Partial: []byte(marker + " partial"), EventsFrom: 2, Events: [][]byte{[]byte("data: " + marker + " event 2")}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Finish(ctx, l, &store.Finish{Status: store.Completed, Transcript: &tr,
		Response: bytes.Repeat([]byte(marker), 150<<10/len(marker)), UpstreamBody: []byte(marker + " upstream"),
		Repairs: []byte(`["` + marker + `"]`), Restored: []byte(`["` + marker + `"]`), InterruptedCalls: []byte(`["` + marker + `"]`),
		Partial: []byte(marker + " partial"), EventsFrom: 2, Events: [][]byte{[]byte("data: " + marker + " event 2")}}); err != nil {
		t.Fatalf("the same finish again: %v", err)
	}
}

// check reads back what fill wrote.
func check(t *testing.T, st store.Store, k store.Key, run string) {
	t.Helper()
	ctx := context.Background()
	th, err := st.LoadThread(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if len(th.Messages) != 3 || !strings.Contains(string(th.Messages[0]), marker) || !strings.Contains(string(th.Messages[2]), marker+" reply") ||
		len(th.Messages[1]) < 100<<10 || string(th.System) != `"`+marker+` system"` {
		t.Fatalf("thread read back: %d messages, system %q", len(th.Messages), th.System)
	}
	r, err := st.GetRun(ctx, k, run)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(r.Response, []byte(marker)) || string(r.UpstreamBody) != marker+" upstream" || string(r.Repairs) != `["`+marker+`"]` || string(r.Partial) != marker+" partial" {
		t.Fatalf("run read back: %q %q %q %q", r.Response[:40], r.UpstreamBody, r.Repairs, r.Partial)
	}
	var evs []string
	if err := st.FollowEvents(ctx, k, run, 0, func(e store.Event) error { evs = append(evs, string(e.Data)); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(evs, "|") != "data: "+marker+" event 1|data: "+marker+" event 2" {
		t.Fatalf("events read back: %q", evs)
	}
}

// TestNothingInClear writes every kind of content with a marker through
// the wrapper, reads it back, and finds the marker nowhere in the raw
// store: no Redis key or value (every type, single node and cluster), no
// byte of the embedded store's files (the key space's logs and tables,
// the blob files).
func TestNothingInClear(t *testing.T) {
	k := store.Key{Tenant: "acme", Thread: "t1"}
	t.Run("embedded", func(t *testing.T) {
		dir := t.TempDir()
		be := openEmbedded(t, dir, nil)
		st := wrap(t, be, kek(t, "k1"))
		fill(t, st, k, "run1")
		check(t, st, k, "run1")
		be.Close()
		n := 0
		filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			n++
			if bytes.Contains(b, []byte(marker)) || bytes.Contains(b, []byte("MARKER-a1b2")) {
				t.Errorf("%s holds the marker in clear", path)
			}
			return nil
		})
		if n < 3 {
			t.Fatalf("scanned %d files", n)
		}
		// Reopened, it still reads.
		be = openEmbedded(t, dir, nil)
		defer be.Close()
		ring, _ := sealed.NewKeyring(be, kek(t, "k1"))
		if err := ring.Check(context.Background()); err == nil {
			t.Fatal("another KEK under the same id opened the store's keys")
		}
	})
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) (string, goredis.UniversalClient)
	}{
		{"redis", func(t *testing.T) (string, goredis.UniversalClient) {
			srv := redistest.Start(t)
			return srv.URL(), srv.Client(t)
		}},
		{"cluster", func(t *testing.T) (string, goredis.UniversalClient) {
			c := redistest.StartCluster(t, 3)
			return "redis+cluster://" + strings.Join(c.Addrs(), ","), c.ClusterClient(t)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, client := tc.url(t)
			be, err := redisstore.Open(context.Background(), redisstore.Options{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			st := wrap(t, be, kek(t, "k1"))
			fill(t, st, k, "run1")
			check(t, st, k, "run1")
			vals := redistest.DumpAll(t, client)
			if len(vals) < 5 {
				t.Fatalf("scanned %d keys", len(vals))
			}
			for key, v := range vals {
				if strings.Contains(key, "MARKER") || strings.Contains(v, "MARKER-a1b2") {
					t.Errorf("key %q holds the marker in clear", key)
				}
			}
		})
	}
}

// TestTampered: a sealed value altered in the store is an error on read,
// never other content; a value moved to another tenant does not open.
func TestTampered(t *testing.T) {
	dir := t.TempDir()
	be := openEmbedded(t, dir, nil)
	defer be.Close()
	st := wrap(t, be, kek(t, "k1"))
	k := store.Key{Tenant: "acme", Thread: "t1"}
	fill(t, st, k, "run1")
	ctx := context.Background()
	// Flip a byte of the sealed partial through a raw finish-free path:
	// the backend's Renew writes what it is given.
	raw, err := be.GetRun(ctx, k, "run1")
	if err != nil {
		t.Fatal(err)
	}
	if !sealed.IsSealed(raw.Partial) || bytes.Contains(raw.Partial, []byte(marker)) {
		t.Fatalf("stored partial is not sealed: %q", raw.Partial)
	}
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
	}{
		{"flipped bit", func(b []byte) []byte { b[len(b)-20] ^= 1; return b }},
		{"flipped tag", func(b []byte) []byte { b[len(b)-1] ^= 0x80; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-1] }},
		{"other key id", func(b []byte) []byte { b[3] ^= 1; return b }},
		{"too short", func(b []byte) []byte { return b[:10] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.edit(bytes.Clone(raw.Partial))
			k2 := store.Key{Tenant: "acme", Thread: "t-" + strings.ReplaceAll(tc.name, " ", "-")}
			started, err := be.StartRun(ctx, store.StartRun{Key: k2, RunID: k2.Thread, Owner: "o", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := be.Renew(ctx, started.Lease, store.RunPatch{Partial: v}); err != nil {
				t.Fatal(err)
			}
			r, err := st.GetRun(ctx, k2, k2.Thread)
			if err == nil || !(errors.Is(err, sealed.ErrTampered) || errors.Is(err, sealed.ErrNoKey)) {
				t.Fatalf("tampered value read as %q, err %v", r.Partial, err)
			}
		})
	}
	// Copied to another thread of the tenant (a fork): opens. To another
	// tenant: does not.
	for _, tc := range []struct {
		tenant string
		opens  bool
	}{{"acme", true}, {"other", false}} {
		k2 := store.Key{Tenant: tc.tenant, Thread: "copy"}
		started, err := be.StartRun(ctx, store.StartRun{Key: k2, RunID: "r", Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := be.Renew(ctx, started.Lease, store.RunPatch{Partial: raw.Partial}); err != nil {
			t.Fatal(err)
		}
		r, err := st.GetRun(ctx, k2, "r")
		if tc.opens && (err != nil || string(r.Partial) != marker+" partial") {
			t.Fatalf("copied within the tenant: %q, %v", r.Partial, err)
		}
		if !tc.opens && err == nil {
			t.Fatalf("copied to another tenant, read as %q", r.Partial)
		}
	}
}

// TestPlaintext: a value stored before encryption was on reads as it is,
// or is refused with RefusePlaintext.
func TestPlaintext(t *testing.T) {
	be := openEmbedded(t, t.TempDir(), nil)
	defer be.Close()
	ctx := context.Background()
	k := store.Key{Tenant: "acme", Thread: "old"}
	started, err := be.StartRun(ctx, store.StartRun{Key: k, RunID: "r", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m := []byte(`{"role":"user","content":"before"}`)
	if err := be.Finish(ctx, started.Lease, &store.Finish{Status: store.Completed, Transcript: &store.Transcript{Messages: [][]byte{m}, Hashes: []store.Hash{storetest.HashOf(m)}}}); err != nil {
		t.Fatal(err)
	}
	ring, err := sealed.NewKeyring(be, kek(t, "k1"))
	if err != nil {
		t.Fatal(err)
	}
	th, err := sealed.Wrap(be, ring, sealed.Options{}).LoadThread(ctx, k)
	if err != nil || string(th.Messages[0]) != string(m) {
		t.Fatalf("plaintext read: %q, %v", th.Messages, err)
	}
	if _, err := sealed.Wrap(be, ring, sealed.Options{RefusePlaintext: true}).LoadThread(ctx, k); !errors.Is(err, sealed.ErrTampered) {
		t.Fatalf("plaintext with RefusePlaintext: %v", err)
	}
}

// TestRotation: data keys made under an older KEK stay readable while it
// is listed; new writes go under a new data key; Rewrap moves every
// wrapped key to the current KEK, after which the old KEK can go; a KEK
// the store's keys are not wrapped under fails Check.
func TestRotation(t *testing.T) {
	be := openEmbedded(t, t.TempDir(), nil)
	defer be.Close()
	ctx := context.Background()
	k1, k2 := kek(t, "k1"), kek(t, "k2")
	a, b := store.Key{Tenant: "acme", Thread: "a"}, store.Key{Tenant: "acme", Thread: "b"}
	fill(t, wrap(t, be, k1), a, "run1")

	st := wrap(t, be, k2, k1)
	check(t, st, a, "run1")
	fill(t, st, b, "run2")
	check(t, st, b, "run2")
	raw, _ := be.GetRun(ctx, b, "run2")
	if !bytes.Contains(raw.Partial[:8], []byte("d:k2")) {
		t.Fatalf("a new write is not under the new data key: %q", raw.Partial[:8])
	}

	// Without k1, the keys it wraps do not open.
	ring, _ := sealed.NewKeyring(be, k2)
	if err := ring.Check(ctx); err == nil || !strings.Contains(err.Error(), `"k1"`) {
		t.Fatalf("Check with k1 dropped before the rewrap: %v", err)
	}
	if _, err := sealed.Wrap(be, ring, sealed.Options{}).LoadThread(ctx, a); !errors.Is(err, sealed.ErrUnknownKEK) {
		t.Fatalf("reading under an unlisted KEK: %v", err)
	}

	ring, _ = sealed.NewKeyring(be, k2, k1)
	stats, err := ring.Rewrap(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// check + acme's d:k1, d:k2, mac.
	if stats.Keys != 4 || stats.Rewrapped != 3 || stats.Current != 1 {
		t.Fatalf("rewrap: %+v", stats)
	}
	if stats, err = ring.Rewrap(ctx); err != nil || stats.Rewrapped != 0 {
		t.Fatalf("rewrap again: %+v, %v", stats, err)
	}
	st = wrap(t, be, k2)
	check(t, st, a, "run1")
	check(t, st, b, "run2")

	// A wrong key under the current id.
	ring, _ = sealed.NewKeyring(be, kek(t, "k2"))
	if err := ring.Check(ctx); err == nil || !strings.Contains(err.Error(), "does not open") {
		t.Fatalf("Check with a wrong key: %v", err)
	}
}

// TestShredded: once a tenant's keys are deleted, its content does not
// read (an error), and other tenants' does.
func TestShredded(t *testing.T) {
	be := openEmbedded(t, t.TempDir(), nil)
	defer be.Close()
	ctx := context.Background()
	k := kek(t, "k1")
	a, b := store.Key{Tenant: "acme", Thread: "a"}, store.Key{Tenant: "beta", Thread: "a"}
	st := wrap(t, be, k)
	fill(t, st, a, "run1")
	fill(t, st, b, "run1")
	if n, err := be.DeleteKeys(ctx, "acme"); err != nil || n != 2 {
		t.Fatalf("DeleteKeys: %d, %v", n, err)
	}
	st = wrap(t, be, k) // a fresh cache, as another replica
	if _, err := st.LoadThread(ctx, a); !errors.Is(err, sealed.ErrNoKey) {
		t.Fatalf("shredded tenant's thread: %v", err)
	}
	check(t, st, b, "run1")
}

// TestHashKey: the tenant's hash transform is fixed (another keyring over
// the same store gives the same), differs between tenants, and is not
// the identity.
func TestHashKey(t *testing.T) {
	be := openEmbedded(t, t.TempDir(), nil)
	defer be.Close()
	ctx := context.Background()
	k := kek(t, "k1")
	h := storetest.HashOf([]byte("x"))
	hk := func(st store.Store, tenant string) store.Hash {
		f, err := st.(store.HashKeyer).HashKey(ctx, tenant)
		if err != nil {
			t.Fatal(err)
		}
		return f(h)
	}
	one, two := wrap(t, be, k), wrap(t, be, kek(t, "k2"), k)
	if a := hk(one, "acme"); a == h || a != hk(two, "acme") || a == hk(one, "beta") {
		t.Fatalf("hash key: %x %x %x (plain %x)", a, hk(two, "acme"), hk(one, "beta"), h)
	}
}

// TestPassesThrough: the wrapper offers what the proxy type-asserts on
// its store: AsyncSaver, Durability (saying the content is encrypted),
// HashKeyer, and Journal and StartOffline exactly when the wrapped store
// (the spool) has them.
func TestPassesThrough(t *testing.T) {
	ctx := context.Background()
	be := openEmbedded(t, t.TempDir(), nil)
	defer be.Close()
	k := kek(t, "k1")
	plain := wrap(t, be, k)
	sp, err := spool.Open(be, spool.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	ring, err := sealed.NewKeyring(be, k)
	if err != nil {
		t.Fatal(err)
	}
	spooled := sealed.Wrap(sp, ring, sealed.Options{})
	type offline interface {
		StartOffline(context.Context, store.StartRun) (*store.Started, error)
	}
	for _, st := range []store.Store{plain, spooled} {
		if _, ok := st.(store.AsyncSaver); !ok {
			t.Error("not an AsyncSaver")
		}
		if _, ok := st.(store.HashKeyer); !ok {
			t.Error("not a HashKeyer")
		}
		d, ok := st.(store.Durability)
		if !ok {
			t.Fatal("not a Durability")
		}
		if line, err := d.Durability(ctx); err != nil || !strings.Contains(line, "encrypted at rest") {
			t.Errorf("Durability: %q, %v", line, err)
		}
		if _, ok := st.(offline); !ok {
			t.Error("no StartOffline")
		}
	}
	if _, ok := plain.(store.Journal); ok {
		t.Error("a Journal over a store without one")
	}
	if _, ok := spooled.(store.Journal); !ok {
		t.Error("no Journal over the spool")
	}
	// Over the spool, an offline start works (the tenant's keys cached).
	started, err := spooled.(offline).StartOffline(ctx, store.StartRun{Key: store.Key{Tenant: "acme", Thread: "t"}, RunID: "r", Owner: "o", TTL: time.Minute, Fingerprint: "fp"})
	if err != nil || started == nil {
		t.Fatalf("StartOffline: %v", err)
	}
	// Over a store without it, it says the store is away.
	if _, err := plain.(offline).StartOffline(ctx, store.StartRun{Key: store.Key{Tenant: "acme", Thread: "u"}, RunID: "r2"}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("StartOffline without a spool: %v", err)
	}
}
