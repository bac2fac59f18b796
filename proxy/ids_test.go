package proxy

import (
	"strings"
	"testing"
)

// TestDerivedIDsAreStable pins the ids derived from names: a thread's
// session id goes upstream on every turn (providers' prompt caches key on
// it) and a pass-through tenant names stored threads, so neither may
// change from one release to the next.
func TestDerivedIDsAreStable(t *testing.T) {
	long := strings.Repeat("t", 128)
	for _, tc := range []struct{ got, want string }{
		{threadSessionID("k-abc", "thread-1"), "chr-079ca2609966ca79d02dcb5758dbf4fc"},
		{threadSessionID("", ""), "chr-1e254f0849c0ddf9a395c53f670c6c78"},
		{threadSessionID("tenant-with-a-rather-long-name-0123456789", "a-thread-id-of-the-maximum-length-1234567890"), "chr-9a5b75f8a0bd20ad5ea71ebd014986fb"},
		// (checked against Python's hashlib: the input passes the 256-byte buffer)
		{threadSessionID(long, long), "chr-2cb3d430777ecd7299ad54fd4f2d6973"},
		{passThroughTenant([]byte("sk-test")), "k-f3abf2a6cc4f00987743db5f"},
		{passThroughTenant(nil), "k-e3b0c44298fc1c149afbf4c8"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
}

// TestNewID: a generated id is the prefix and 20 characters of lower-case
// base32, inside the thread-id alphabet, and two are never equal.
func TestNewID(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := newID("run_")
		rest, ok := strings.CutPrefix(id, "run_")
		if !ok || len(rest) != 20 || !validID([]byte(id)) {
			t.Fatalf("newID = %q", id)
		}
		for _, c := range rest {
			if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
				t.Fatalf("newID = %q: %q is not lower-case base32", id, c)
			}
		}
		if seen[id] {
			t.Fatalf("newID repeated %q", id)
		}
		seen[id] = true
	}
}
