package sealed

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
)

// A sealed value:
//
//	0xC1 | n | key id (n bytes) | nonce (12) | AES-256-GCM ciphertext and tag (16)
//
// 0xC1 never starts UTF-8 text (nor JSON, nor an SSE event), so a value
// written before encryption was turned on is told apart and read as it
// is. The additional data binds the header, the kind of field (a message
// does not open as an event) and the tenant (nor in another tenant); not
// the thread, so a thread's stored values may be copied to another thread
// of the tenant (a fork) and still open.
const (
	sealVersion = 0xC1
	nonceSize   = 12
	tagSize     = 16
)

// Kind is what a sealed value is, bound into its additional data.
type Kind byte

// The kinds of field the store wrapper seals.
const (
	KindMessage  Kind = 'm' // a transcript message
	KindSystem   Kind = 's' // a thread's system blob
	KindResponse Kind = 'r' // a run's stored response body
	KindUpstream Kind = 'u' // a run's upstream request body
	KindError    Kind = 'e' // a run's upstream error body
	KindPartial  Kind = 'p' // a run's text-so-far
	KindEvent    Kind = 'v' // an event of a run's log
	KindLedger   Kind = 'l' // a run's repairs, restored fields, interrupted calls
)

// ErrTampered: a sealed value does not open (altered, truncated, moved to
// another tenant or field, or sealed under another key).
var ErrTampered = errors.New("sealed: value does not open")

func header(id string) []byte {
	h := make([]byte, 0, 2+len(id))
	h = append(h, sealVersion, byte(len(id)))
	return append(h, id...)
}

// IsSealed reports whether v is a sealed value (else it was stored in
// clear, before encryption was on).
func IsSealed(v []byte) bool { return len(v) > 0 && v[0] == sealVersion }

// parse splits a sealed value into its key id, nonce and ciphertext.
func parse(v []byte) (hdr []byte, id string, nonce, ct []byte, err error) {
	if len(v) < 2 || v[0] != sealVersion {
		return nil, "", nil, nil, fmt.Errorf("%w: not a sealed value", ErrTampered)
	}
	n := int(v[1])
	if n == 0 || len(v) < 2+n+nonceSize+tagSize {
		return nil, "", nil, nil, fmt.Errorf("%w: %d bytes is too short", ErrTampered, len(v))
	}
	return v[:2+n], string(v[2 : 2+n]), v[2+n : 2+n+nonceSize], v[2+n+nonceSize:], nil
}

func aad(hdr []byte, kind Kind, tenant string) []byte {
	a := make([]byte, 0, len(hdr)+1+len(tenant))
	a = append(a, hdr...)
	a = append(a, byte(kind))
	return append(a, tenant...)
}

// seal encrypts p under dk with a random nonce.
func (dk *dataKey) seal(kind Kind, tenant string, p []byte) []byte {
	out := make([]byte, len(dk.hdr)+nonceSize, len(dk.hdr)+nonceSize+len(p)+tagSize)
	copy(out, dk.hdr)
	randomNonce(out[len(dk.hdr):])
	return dk.aead.Seal(out, out[len(dk.hdr):], p, aad(dk.hdr, kind, tenant))
}

// nonces hands out random nonces from a buffer crypto/rand fills 4 KiB at
// a time: one getrandom call per 341 nonces instead of one each (a
// stream's events are sealed one by one). Every nonce is fresh random
// bytes, used once.
var nonces struct {
	sync.Mutex
	buf [4096 - 4096%nonceSize]byte
	at  int
}

func randomNonce(dst []byte) {
	nonces.Lock()
	if nonces.at == 0 || nonces.at+nonceSize > len(nonces.buf) {
		if _, err := rand.Read(nonces.buf[:]); err != nil {
			panic(err) // crypto/rand does not fail
		}
		nonces.at = 0
	}
	copy(dst, nonces.buf[nonces.at:nonces.at+nonceSize])
	clear(nonces.buf[nonces.at : nonces.at+nonceSize])
	nonces.at += nonceSize
	if nonces.at == len(nonces.buf) {
		nonces.at = 0
	}
	nonces.Unlock()
}

// sealFixed encrypts p with a nonce derived from p itself (a keyed hash
// of kind, tenant and p): the same value sealed twice is the same bytes.
// The thread's system blob is sealed so, because the stores compare it
// with the stored one to skip rewriting it (and a retried write must
// change nothing). A nonce repeats only with the same plaintext, so this
// reveals only that two system blobs of a tenant are equal.
func (dk *dataKey) sealFixed(kind Kind, tenant string, p []byte) []byte {
	m := hmac.New(sha256.New, dk.siv)
	m.Write([]byte{byte(kind)})
	m.Write([]byte(tenant))
	m.Write([]byte{0})
	m.Write(p)
	var sum [sha256.Size]byte
	out := make([]byte, len(dk.hdr)+nonceSize, len(dk.hdr)+nonceSize+len(p)+tagSize)
	copy(out, dk.hdr)
	copy(out[len(dk.hdr):], m.Sum(sum[:0]))
	return dk.aead.Seal(out, out[len(dk.hdr):], p, aad(dk.hdr, kind, tenant))
}

// open decrypts a sealed value under dk (the key its header names).
func (dk *dataKey) open(kind Kind, tenant string, hdr, nonce, ct []byte) ([]byte, error) {
	p, err := dk.aead.Open(nil, nonce, ct, aad(hdr, kind, tenant))
	if err != nil {
		return nil, fmt.Errorf("%w: %s of tenant %q under key %q", ErrTampered, kind, tenant, dk.id)
	}
	if p == nil {
		p = []byte{}
	}
	return p, nil
}

func (k Kind) String() string {
	switch k {
	case KindMessage:
		return "message"
	case KindSystem:
		return "system blob"
	case KindResponse:
		return "response body"
	case KindUpstream:
		return "upstream body"
	case KindError:
		return "error body"
	case KindPartial:
		return "partial reply"
	case KindEvent:
		return "event"
	case KindLedger:
		return "run ledger"
	}
	return fmt.Sprintf("kind %q", byte(k))
}
