package embedded

import (
	"fmt"
	"testing"

	"github.com/chronicle-proxy/chronicle/store"
)

// TestMarkersManyThreads: a transaction that opens, creates and deletes
// more thread buckets than its list of markers holds (the rest go to a
// map) finds each as it left it, and so does the next one.
func TestMarkersManyThreads(t *testing.T) {
	s, err := Open(t.TempDir(), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 3 * maxMarkers
	key := func(i int) store.Key { return store.Key{Tenant: "t", Thread: fmt.Sprint("th", i)} }
	check := func(tx *Tx, when string) {
		for i := range n {
			if got, want := threadBucket(tx, key(i)) != nil, i%3 != 0; got != want {
				t.Fatalf("%s: thread %d exists %v, want %v", when, i, got, want)
			}
		}
	}
	err = s.update(func(tx *Tx) error {
		for i := range n {
			if threadBucket(tx, key(i)) != nil {
				return fmt.Errorf("thread %d exists before", i)
			}
			if _, err := createThreadBucket(tx, key(i)); err != nil {
				return err
			}
		}
		for i := 0; i < n; i += 3 {
			if err := tx.Bucket(bThreads).DeleteBucket(tx.threadID(key(i))); err != nil {
				return err
			}
		}
		check(tx, "in the writing transaction")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.update(func(tx *Tx) error { check(tx, "in the next write"); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.view(func(tx *Tx) error { check(tx, "in a read"); return nil }); err != nil {
		t.Fatal(err)
	}
}
