package adapters

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"math"
	"slices"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
)

// Hash identifies a message's JSON value for prefix comparison.
type Hash [16]byte

// String returns the hash in hex.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// HashMessage returns a canonical hash of one message: two messages hash
// equal exactly when they are equal JSON values. Whitespace, object key order
// and string escape forms ("\u0041" vs "A") do not matter; numbers compare by
// their literal text ("1" and "1.0" differ); duplicate keys are all kept
// (sorted stably, so their relative order counts). Bytes that are not valid JSON hash by their exact bytes (and
// never equal a valid value's hash). The hash is SHA-256 truncated to 128 bits,
// so it is stable across processes and versions and safe to store.
func HashMessage(msg []byte) Hash {
	if !jsonscan.Valid(msg) {
		h := getHasher()
		h.tag('x')
		h.writeLong(msg)
		return h.done()
	}
	return HashValidMessage(msg)
}

// HashValidMessage is HashMessage for a message the caller has already
// checked with jsonscan.Valid (a request body, or a part of one), without
// checking it again: on a message of megabytes that pass is a third of the
// work.
func HashValidMessage(msg []byte) Hash {
	h := getHasher()
	hashRaw(h, msg)
	return h.done()
}

// hasher is a SHA-256 state with room for what the canonical form writes
// between values: a tag byte, a length, the final sum. Through
// hash.Hash's Write, a buffer on the caller's stack escapes, so each tag
// and length cost an allocation; these are the hasher's own, and hashers
// are pooled.
type hasher struct {
	h       hash.Hash
	scratch [sha256.Size]byte
}

var hashers = sync.Pool{New: func() any { return &hasher{h: sha256.New()} }}

// getHasher returns a reset hasher; done returns it to the pool.
func getHasher() *hasher {
	h := hashers.Get().(*hasher)
	h.h.Reset()
	return h
}

// done is the SHA-256 truncated to a Hash; h must not be used after.
func (h *hasher) done() Hash {
	var out Hash
	copy(out[:], h.h.Sum(h.scratch[:0]))
	hashers.Put(h)
	return out
}

// tag writes one byte (the canonical form's type tags).
func (h *hasher) tag(c byte) {
	h.scratch[0] = c
	h.h.Write(h.scratch[:1])
}

// length writes a length as 8 bytes.
func (h *hasher) length(l int) {
	binary.BigEndian.PutUint64(h.scratch[:8], uint64(l))
	h.h.Write(h.scratch[:8])
}

// writeLong writes b in pieces of hashPiece bytes. SHA-256 hashes one
// Write in a single assembly call, which Go's scheduler cannot preempt:
// on a message of 10 MB that held a P for about 8 ms, and goroutines
// queued on it (a small stream's first event) waited as long. Between
// pieces the goroutine can be preempted.
func (h *hasher) writeLong(b []byte) {
	for len(b) > hashPiece {
		h.h.Write(b[:hashPiece])
		b = b[hashPiece:]
	}
	h.h.Write(b)
}

// hashPiece is about 50 µs of SHA-256.
const hashPiece = 64 << 10

// JSONEqual reports whether a and b are equal JSON values in HashMessage's
// sense.
func JSONEqual(a, b []byte) bool { return HashMessage(a) == HashMessage(b) }

func hashValue(h *hasher, v gjson.Result) {
	switch v.Type {
	case gjson.Null:
		h.tag('z')
	case gjson.False:
		h.tag('f')
	case gjson.True:
		h.tag('t')
	case gjson.Number:
		h.tag('n')
		h.length(len(v.Raw))
		h.h.Write(rawjson.BytesOf(v.Raw))
	case gjson.String:
		h.tag('s')
		h.length(len(v.Str))
		h.writeLong(rawjson.BytesOf(v.Str))
	case gjson.JSON:
		if v.IsArray() {
			h.tag('a')
			var items []gjson.Result
			v.ForEach(func(_, item gjson.Result) bool {
				items = append(items, item)
				return true
			})
			h.length(len(items))
			for _, item := range items {
				hashValue(h, item)
			}
			return
		}
		type kv struct {
			k string
			v gjson.Result
		}
		var kvs []kv
		v.ForEach(func(k, item gjson.Result) bool {
			kvs = append(kvs, kv{k.Str, item})
			return true
		})
		slices.SortStableFunc(kvs, func(a, b kv) int { return strings.Compare(a.k, b.k) })
		h.tag('o')
		h.length(len(kvs))
		for _, e := range kvs {
			h.length(len(e.k))
			h.h.Write(rawjson.BytesOf(e.k))
			hashValue(h, e.v)
		}
	}
}

// hashRaw is hashValue(h, gjson.Parse(raw)) for valid JSON, read with the
// vectorised walkers: a string without escapes is hashed as it stands
// (gjson steps through it byte by byte, and message text is most of a
// message), objects and arrays member by member. What the walkers decline
// (an escaped key or string, a number, a literal) goes through gjson.
// FuzzHashRaw checks the two agree.
func hashRaw(h *hasher, raw []byte) {
	i, j := rawjson.SkipSpace(raw, 0), len(raw)
	for j > i && (raw[j-1] == ' ' || raw[j-1] == '\t' || raw[j-1] == '\n' || raw[j-1] == '\r') {
		j--
	}
	raw = raw[i:j]
	if len(raw) == 0 {
		hashParsed(h, raw)
		return
	}
	switch raw[0] {
	case '"':
		hashString(h, raw)
		return
	case '[':
		if hashArray(h, raw) {
			return
		}
	case '{':
		if hashObject(h, raw) {
			return
		}
	}
	hashParsed(h, raw)
}

// hashParsed hashes raw through gjson (a gjson.Result is 80 bytes, kept
// out of hashRaw's frame, which every level of nesting takes).
//
//go:noinline
func hashParsed(h *hasher, raw []byte) {
	hashValue(h, gjson.Parse(rawjson.Str(raw)))
}

// hashString hashes a valid JSON string.
//
//go:noinline
func hashString(h *hasher, raw []byte) {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') >= 0 {
		inner = appendUnescaped(make([]byte, 0, len(inner)), inner)
	}
	h.tag('s')
	h.length(len(inner))
	h.writeLong(inner)
}

// hashArray and hashObject hash an array or object whose elements the
// walkers can read, and report whether they could. Each level of nesting
// takes one of their frames and one of hashRaw's, so they hold offsets,
// not slices: a reply's hash runs on the connection's goroutine at a
// stream's end, where every frame counts against the 8 KiB stack an open
// stream keeps (docs/design.md, "Runtime mechanics").
//
//go:noinline
func hashArray(h *hasher, raw []byte) bool {
	var buf [8][2]int
	spans, ok := rawjson.ArrayElements(raw, buf[:0])
	if !ok {
		return false
	}
	h.tag('a')
	h.length(len(spans))
	for _, sp := range spans {
		hashRaw(h, raw[sp[0]:sp[1]])
	}
	return true
}

//go:noinline
func hashObject(h *hasher, raw []byte) bool {
	type kv struct{ ks, ke, vs, ve int32 } // offsets in raw
	var buf [8]kv
	kvs := buf[:0]
	failed := false
	walked := rawjson.WalkMembers(raw, func(key []byte, at int) (bool, int) {
		end, ok := rawjson.SkipValue(raw, at)
		if !ok || end > math.MaxInt32 {
			failed = true
			return true, 0
		}
		ks := cap(raw) - cap(key) // key is a slice of raw: its offset
		kvs = append(kvs, kv{int32(ks), int32(ks + len(key)), int32(at), int32(end)})
		return false, end
	})
	if !walked || failed {
		return false
	}
	slices.SortStableFunc(kvs, func(a, b kv) int { return bytes.Compare(raw[a.ks:a.ke], raw[b.ks:b.ke]) })
	h.tag('o')
	h.length(len(kvs))
	for _, e := range kvs {
		h.length(int(e.ke - e.ks))
		h.h.Write(raw[e.ks:e.ke])
		hashRaw(h, raw[e.vs:e.ve])
	}
	return true
}

// appendUnescaped appends the text of a valid JSON string's body (between
// its quotes) to dst, decoding escapes as gjson does: a \u high surrogate
// followed by a low one is one rune, a lone surrogate becomes U+FFFD. The
// runs between escapes are copied whole.
func appendUnescaped(dst, in []byte) []byte {
	for {
		k := bytes.IndexByte(in, '\\')
		if k < 0 {
			return append(dst, in...)
		}
		dst = append(dst, in[:k]...)
		in = in[k+1:]
		switch c := in[0]; c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(in[1:5])
			in = in[5:]
			if r >= 0xD800 && r < 0xDC00 && len(in) >= 6 && in[0] == '\\' && in[1] == 'u' {
				if r2 := hex4(in[2:6]); r2 >= 0xDC00 && r2 < 0xE000 {
					r = utf16.DecodeRune(r, r2)
					in = in[6:]
				}
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
		in = in[1:]
	}
}

// hex4 reads four hex digits (valid JSON has them after \u).
func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}
