package adapters

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
)

func FuzzArrayReader(f *testing.F) {
	f.Add([]byte("[{\"a\": [1, \"]\"]}\r\n,\r\n{\"b\": \"\\\"\"}\n]\n"), uint8(3))
	f.Add([]byte("[]"), uint8(1))
	f.Add([]byte("[1, \"x\", null]"), uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		r := NewArrayReader(&chunked{in, int(chunk%8) + 1}, 1<<16)
		var cat []byte
		for {
			raw, val, err := r.Next()
			if errors.Is(err, io.EOF) {
				cat = append(cat, r.Tail()...)
				if !bytes.Equal(cat, in) {
					t.Fatalf("Raw+Tail %q != input %q", cat, in)
				}
				return
			}
			if err != nil {
				return
			}
			if !bytes.HasSuffix(raw, val) {
				t.Fatalf("value %q not at the end of raw %q", val, raw)
			}
			cat = append(cat, raw...)
		}
	})
}

// FuzzHashRaw: hashRaw, which walks raw JSON with the vectorised
// scanners, hashes every valid value exactly as hashValue on gjson's parse
// does. Stored hashes depend on it.
func FuzzHashRaw(f *testing.F) {
	for _, s := range []string{
		`{"role":"user","content":"hi"}`, ` {"b":[1, {"x":null}],"a":"\u0041","a":true} `,
		`{"k\"ey":1}`, `["a\nb","c",-1.5e3,false]`, `["\ud83d\ude00","\ud83d x","\udc00","\u00e9\n\t\"\\\/\b\f\r","\ud83d\u0041"]`, `{}`, `[]`, `""`, `{"content":[{"type":"text","text":"x"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !jsonscan.Valid(in) {
			return
		}
		a, b := getHasher(), getHasher()
		hashRaw(a, in)
		hashValue(b, gjson.ParseBytes(in))
		if a.done() != b.done() {
			t.Fatalf("hashRaw(%q) differs from hashValue", in)
		}
	})
}

type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(c.n, len(p), len(c.b))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}
