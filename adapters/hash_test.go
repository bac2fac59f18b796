package adapters

import (
	"bytes"
	"crypto/sha256"
	"testing"
)

// writeLong feeds every byte once, in order, whatever the length: the
// digest equals one Write's, at and around the piece boundaries.
func TestWriteLong(t *testing.T) {
	data := make([]byte, 3*hashPiece+17)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, n := range []int{0, 1, hashPiece - 1, hashPiece, hashPiece + 1, 2 * hashPiece, len(data)} {
		h := getHasher()
		h.writeLong(data[:n])
		want := sha256.Sum256(data[:n])
		if got := h.done(); !bytes.Equal(got[:], want[:len(got)]) {
			t.Errorf("%d bytes: digest differs from one Write's", n)
		}
	}
	// A long message hashes as it did before the pieces: the same value
	// written whole.
	long := []byte(`{"role":"user","content":"` + string(bytes.Repeat([]byte("ab\\\"c"), hashPiece)) + `"}`)
	if HashValidMessage(long) != HashMessage(long) {
		t.Error("HashValidMessage and HashMessage disagree on a long message")
	}
}

// TestHashNoAllocs: hashing a message without escapes allocates nothing
// (each type tag and length once cost an allocation: hash.Hash's Write
// lets a stack buffer escape); a message is hashed on every turn for
// every message not sent exactly as stored.
func TestHashNoAllocs(t *testing.T) {
	for _, msg := range []string{
		`{"role":"user","content":"hello"}`,
		`{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}]}`,
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}],"n":1.5,"ok":true}`,
	} {
		b := []byte(msg)
		HashValidMessage(b) // the pool's first hasher
		if a := testing.AllocsPerRun(200, func() { HashValidMessage(b) }); a != 0 {
			t.Errorf("%v allocations hashing %s, want 0", a, msg)
		}
	}
}

// BenchmarkHashValidMessage hashes the messages a chat turn hashes: a
// user's text, an assistant's tool call and a multi-part content array.
func BenchmarkHashValidMessage(b *testing.B) {
	for _, tc := range []struct{ name, msg string }{
		{"text", `{"role":"user","content":"question number ` + string(bytes.Repeat([]byte("x"), 80)) + `"}`},
		{"tool-call", `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}`},
		{"parts", `{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"https://example.com/a.png","detail":"low"}}]}`},
	} {
		msg := []byte(tc.msg)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				HashValidMessage(msg)
			}
		})
	}
}
