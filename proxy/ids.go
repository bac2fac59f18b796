package proxy

import (
	"strconv"

	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"

	"github.com/cespare/xxhash/v2"
)

// idEncoding is base32 in lower case: ids are drawn in the thread-id
// alphabet as they are.
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID returns prefix plus 20 random base32 characters (100 bits), inside
// the thread-id alphabet.
func newID(prefix string) string {
	var b [13]byte
	_, _ = rand.Read(b[:])
	var out [32]byte
	id := append(out[:0], prefix...)
	n := len(id)
	id = append(id, make([]byte, idEncoding.EncodedLen(len(b)))...) // 21
	idEncoding.Encode(id[n:], b[:])
	return string(id[:n+20])
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
	var in [256]byte
	b := append(in[:0], "chronicle-session\x00"...)
	b = append(append(append(b, tenant...), 0), thread...)
	sum := sha256.Sum256(b)
	return hexID("chr-", sum[:16])
}

// hexID is prefix followed by b in hex, built in one allocation.
func hexID(prefix string, b []byte) string {
	var out [64]byte
	id := append(out[:0], prefix...)
	n := len(id)
	id = append(id, make([]byte, hex.EncodedLen(len(b)))...)
	hex.Encode(id[n:], b)
	return string(id)
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
