package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/chronicle-proxy/chronicle/store"
)

// testKeys: a store.Keys keeps one wrapped key per (tenant, id); creators
// racing on an id agree on one; a re-wrap is a compare-and-swap; deleting
// a tenant's keys leaves the other tenants' and lists nothing of its own.
func testKeys(t *testing.T, h *harness) {
	ks, ok := h.s.(store.Keys)
	if !ok {
		t.Skip("the backend keeps no data keys (store.Keys)")
	}
	ctx := h.ctx
	if _, err := ks.GetKey(ctx, "acme", "k1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetKey before any: %v, want ErrNotFound", err)
	}
	got, err := ks.CreateKey(ctx, "acme", "k1", []byte("wrapped-1\x00\xff"))
	if err != nil || string(got) != "wrapped-1\x00\xff" {
		t.Fatalf("CreateKey: %q, %v", got, err)
	}
	// A second creator gets the first one's key.
	if got, err = ks.CreateKey(ctx, "acme", "k1", []byte("other")); err != nil || string(got) != "wrapped-1\x00\xff" {
		t.Fatalf("CreateKey again: %q, %v; want the stored key", got, err)
	}
	var wg sync.WaitGroup
	won := make([][]byte, 8)
	for i := range won {
		wg.Add(1)
		go func() {
			defer wg.Done()
			won[i], _ = ks.CreateKey(ctx, "acme", "race", []byte(fmt.Sprintf("w%d", i)))
		}()
	}
	wg.Wait()
	for i := range won {
		if len(won[i]) == 0 || !bytes.Equal(won[i], won[0]) {
			t.Fatalf("racing creators got %q and %q", won[0], won[i])
		}
	}
	if _, err := ks.CreateKey(ctx, "beta", "k1", []byte("beta-1")); err != nil {
		t.Fatal(err)
	}
	if v, err := ks.GetKey(ctx, "beta", "k1"); err != nil || string(v) != "beta-1" {
		t.Fatalf("GetKey beta: %q, %v", v, err)
	}

	all, err := ks.ListKeys(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []store.WrappedKey{{Tenant: "acme", ID: "k1", Wrapped: []byte("wrapped-1\x00\xff")}, {Tenant: "acme", ID: "race", Wrapped: won[0]}, {Tenant: "beta", ID: "k1", Wrapped: []byte("beta-1")}}
	if fmt.Sprint(all) != fmt.Sprint(want) {
		t.Fatalf("ListKeys: %v, want %v", all, want)
	}
	one, err := ks.ListKeys(ctx, "beta")
	if err != nil || fmt.Sprint(one) != fmt.Sprint(want[2:]) {
		t.Fatalf("ListKeys(beta): %v, %v", one, err)
	}

	// Re-wrap: compare-and-swap on the stored form.
	if err := ks.ReplaceKey(ctx, "acme", "k1", []byte("stale"), []byte("wrapped-2")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("ReplaceKey from a stale form: %v, want ErrConflict", err)
	}
	if err := ks.ReplaceKey(ctx, "acme", "k1", []byte("wrapped-1\x00\xff"), []byte("wrapped-2")); err != nil {
		t.Fatal(err)
	}
	if err := ks.ReplaceKey(ctx, "acme", "k1", []byte("wrapped-1\x00\xff"), []byte("wrapped-2")); err != nil {
		t.Fatalf("ReplaceKey repeated: %v, want success", err)
	}
	if v, _ := ks.GetKey(ctx, "acme", "k1"); string(v) != "wrapped-2" {
		t.Fatalf("after ReplaceKey: %q", v)
	}
	if err := ks.ReplaceKey(ctx, "acme", "nope", []byte("a"), []byte("b")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("ReplaceKey of no key: %v, want ErrNotFound", err)
	}

	// Crypto-shredding: the tenant's keys go, the others stay.
	if n, err := ks.DeleteKeys(ctx, "acme"); err != nil || n != 2 {
		t.Fatalf("DeleteKeys: %d, %v; want 2", n, err)
	}
	if _, err := ks.GetKey(ctx, "acme", "k1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("GetKey after DeleteKeys: %v", err)
	}
	if all, err = ks.ListKeys(ctx, ""); err != nil || fmt.Sprint(all) != fmt.Sprint(want[2:]) {
		t.Fatalf("ListKeys after DeleteKeys: %v, %v", all, err)
	}
	if n, err := ks.DeleteKeys(ctx, "acme"); err != nil || n != 0 {
		t.Fatalf("DeleteKeys again: %d, %v", n, err)
	}

	for _, bad := range []struct{ tenant, id string }{{"", "k"}, {"a b", "k"}, {"acme", ""}, {"acme", "a/b"}} {
		if _, err := ks.CreateKey(ctx, bad.tenant, bad.id, []byte("w")); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("CreateKey(%q, %q): %v, want ErrInvalid", bad.tenant, bad.id, err)
		}
	}
	if _, err := ks.CreateKey(ctx, "acme", "k", nil); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("CreateKey with no key: %v, want ErrInvalid", err)
	}
}
