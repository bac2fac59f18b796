package proxy

import (
	"strconv"

	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"strings"

	"github.com/cespare/xxhash/v2"
)

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

// newID returns prefix plus 20 random base32 characters (100 bits), inside
// the thread-id alphabet.
func newID(prefix string) string {
	var b [13]byte
	_, _ = rand.Read(b[:])
	return prefix + strings.ToLower(idEncoding.EncodeToString(b[:])[:20])
}

// validID reports whether id fits the thread/run id alphabet: 1–128 of
// [A-Za-z0-9._:-].
func validID(id []byte) bool {
	if len(id) == 0 || len(id) > 128 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// threadSessionID is the stable session id of a thread: derived from tenant
// and thread id, so it is the same on every turn, replica and restart, and
// reveals neither.
func threadSessionID(tenant, thread string) string {
	sum := sha256.Sum256([]byte("chronicle-session\x00" + tenant + "\x00" + thread))
	return "chr-" + hex.EncodeToString(sum[:16])
}

// fingerprint identifies a request body, so an X-Run-Id reused with a
// different body is told from a retry. It guards against a client's own
// mistake, not an attacker (a run id is the client's own), so a fast
// non-cryptographic hash of the body and its length does: XXH64 reads a
// 38 KB history in a few microseconds where SHA-256 took about 30.
func fingerprint(body []byte) string {
	var b [len("xx") + 16 + 8]byte
	out := append(b[:0], "xx"...)
	out = strconv.AppendUint(out, xxhash.Sum64(body), 16)
	out = append(out, '.')
	out = strconv.AppendInt(out, int64(len(body)), 36)
	return string(out)
}
