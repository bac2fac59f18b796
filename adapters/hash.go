package adapters

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"sort"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
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
	h := sha256.New()
	if !jsonscan.Valid(msg) {
		h.Write([]byte{'x'})
		h.Write(msg)
	} else {
		hashValue(h, gjson.Parse(str(msg)))
	}
	var sum [sha256.Size]byte
	var out Hash
	copy(out[:], h.Sum(sum[:0]))
	return out
}

// HashValidMessage is HashMessage for a message the caller has already
// checked with jsonscan.Valid (a request body, or a part of one), without
// checking it again: on a message of megabytes that pass is a third of the
// work.
func HashValidMessage(msg []byte) Hash {
	h := sha256.New()
	hashValue(h, gjson.Parse(str(msg)))
	var sum [sha256.Size]byte
	var out Hash
	copy(out[:], h.Sum(sum[:0]))
	return out
}

// JSONEqual reports whether a and b are equal JSON values in HashMessage's
// sense.
func JSONEqual(a, b []byte) bool { return HashMessage(a) == HashMessage(b) }

func hashValue(h hash.Hash, v gjson.Result) {
	var n [8]byte
	writeLen := func(l int) {
		binary.BigEndian.PutUint64(n[:], uint64(l))
		h.Write(n[:])
	}
	switch v.Type {
	case gjson.Null:
		h.Write([]byte{'z'})
	case gjson.False:
		h.Write([]byte{'f'})
	case gjson.True:
		h.Write([]byte{'t'})
	case gjson.Number:
		h.Write([]byte{'n'})
		writeLen(len(v.Raw))
		h.Write(bytesOf(v.Raw))
	case gjson.String:
		h.Write([]byte{'s'})
		writeLen(len(v.Str))
		h.Write(bytesOf(v.Str))
	case gjson.JSON:
		if v.IsArray() {
			h.Write([]byte{'a'})
			var items []gjson.Result
			v.ForEach(func(_, item gjson.Result) bool {
				items = append(items, item)
				return true
			})
			writeLen(len(items))
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
		sort.SliceStable(kvs, func(i, j int) bool { return kvs[i].k < kvs[j].k })
		h.Write([]byte{'o'})
		writeLen(len(kvs))
		for _, e := range kvs {
			writeLen(len(e.k))
			h.Write(bytesOf(e.k))
			hashValue(h, e.v)
		}
	}
}
