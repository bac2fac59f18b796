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
		h := sha256.New()
		writeLong(h, data[:n])
		if want := sha256.Sum256(data[:n]); !bytes.Equal(h.Sum(nil), want[:]) {
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
