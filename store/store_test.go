package store

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"
)

// TestDiffDigests: Diff's two digests are Digest of the stored and of the
// next transcript, and Digest is the SHA-1 of the hashes laid end to end
// (what the Redis scripts compute over the stored hash blob), whatever
// prefix the two share.
func TestDiffDigests(t *testing.T) {
	h := func(b byte) Hash { var x Hash; x[0], x[15] = b, ^b; return x }
	blob := func(hs []Hash) string {
		var b []byte
		for _, x := range hs {
			b = append(b, x[:]...)
		}
		sum := sha1.Sum(b)
		return hex.EncodeToString(sum[:])
	}
	a, b, c, d := h(1), h(2), h(3), h(4)
	for _, tc := range []struct {
		name         string
		stored, next []Hash
		keep         int
	}{
		{"both empty", nil, nil, 0},
		{"new thread", nil, []Hash{a, b}, 0},
		{"same", []Hash{a, b, c}, []Hash{a, b, c}, 3},
		{"appended", []Hash{a, b}, []Hash{a, b, c, d}, 2},
		{"tail replaced", []Hash{a, b, c}, []Hash{a, b, d}, 2},
		{"cut", []Hash{a, b, c}, []Hash{a}, 1},
		{"all replaced", []Hash{a, b}, []Hash{c}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := Digest(tc.next), blob(tc.next); got != want {
				t.Fatalf("Digest = %s, SHA-1 of the hashes is %s", got, want)
			}
			msgs := make([][]byte, len(tc.next))
			tr := Diff(tc.stored, msgs, tc.next)
			if tr.Keep != tc.keep || len(tr.Hashes) != len(tc.next)-tc.keep || tr.BaseLen != len(tc.stored) {
				t.Fatalf("keep %d, %d hashes, base %d", tr.Keep, len(tr.Hashes), tr.BaseLen)
			}
			if tr.Digest != blob(tc.next) || tr.BaseDigest != blob(tc.stored) {
				t.Fatalf("digest %s base %s, want %s and %s", tr.Digest, tr.BaseDigest, blob(tc.next), blob(tc.stored))
			}
		})
	}
}
