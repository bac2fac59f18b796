package sealed

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/embedded"
	"github.com/chronicle-proxy/chronicle/store/spool"
)

// TestShredTenant: the erasure of a tenant finds the wrapper's ShredTenant
// (and the backend's Erasure) through a sealed store over the spool; it
// deletes the tenant's data keys and this replica's cached copies at once;
// another replica, which cached them, asks the store again in the
// background after KeyCacheTTL and then makes a new key rather than
// writing on under the deleted one. Another tenant's keys stay.
func TestShredTenant(t *testing.T) {
	ctx := context.Background()
	be, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	sp, err := spool.Open(be, spool.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	k := KEK{ID: "k1", Key: raw}
	ring1, err := NewKeyring(be, k)
	if err != nil {
		t.Fatal(err)
	}
	ring2, err := NewKeyring(be, k)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	ring2.now = func() time.Time { return now }
	one := Wrap(sp, ring1, Options{})

	first, err := ring2.writeKey(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ring1.writeKey(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := ring1.writeKey(ctx, "beta"); err != nil {
		t.Fatal(err)
	}

	sh, ok := store.As[store.Shredder](one)
	if !ok {
		t.Fatal("no store.Shredder through the sealed store")
	}
	if _, ok := store.As[store.Erasure](one); !ok {
		t.Fatal("the backend's store.Erasure is not found through the sealed store")
	}
	if err := sh.ShredTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := ring1.get(ctx, "acme", dataPrefix+"k1", false); !errors.Is(err, ErrNoKey) {
		t.Fatalf("this replica after the shred: %v, want ErrNoKey", err)
	}
	if _, err := ring1.get(ctx, "beta", dataPrefix+"k1", false); err != nil {
		t.Fatalf("another tenant's key: %v", err)
	}

	cached, err := ring2.writeKey(ctx, "acme")
	if err != nil || cached != first {
		t.Fatalf("the other replica within KeyCacheTTL: %p, %v; want its cached %p", cached, err, first)
	}
	now = now.Add(KeyCacheTTL)
	stale, err := ring2.writeKey(ctx, "acme") // a turn does not wait for the refresh
	if err != nil || stale != first {
		t.Fatalf("the other replica at KeyCacheTTL: %p, %v; want its cached %p while it refreshes", stale, err, first)
	}
	ring2.refreshes.Wait()
	fresh, err := ring2.writeKey(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if fresh == first || bytes.Equal(fresh.siv, first.siv) {
		t.Fatal("the other replica wrote on under the shredded key after KeyCacheTTL")
	}
}

// unreachableKeys is a store.Keys whose reads fail as a store that cannot
// be reached does.
type unreachableKeys struct{ store.Keys }

func (unreachableKeys) GetKey(context.Context, string, string) ([]byte, error) {
	return nil, store.ErrUnavailable
}

// TestStaleKeyOutlivesOutage: a cached key past KeyCacheTTL whose refresh
// cannot reach the store stays in use, so writes still get sealed and go
// on to the spool while the store is away.
func TestStaleKeyOutlivesOutage(t *testing.T) {
	ctx := context.Background()
	be, err := embedded.Open(t.TempDir(), embedded.Options{NoSync: true, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		t.Fatal(err)
	}
	ring, err := NewKeyring(be, KEK{ID: "k1", Key: raw})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	ring.now = func() time.Time { return now }
	first, err := ring.writeKey(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	ring.keys = unreachableKeys{be}
	for range 2 {
		now = now.Add(KeyCacheTTL)
		got, err := ring.writeKey(ctx, "acme")
		if err != nil || got != first {
			t.Fatalf("with the store away: %p, %v; want the cached %p", got, err, first)
		}
		ring.refreshes.Wait()
	}
}
