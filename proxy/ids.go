package proxy

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"strings"
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
// different body is told from a retry.
func fingerprint(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:12])
}
