package sealed

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// fuzzKey is a fixed data key, so the seeds in testdata/fuzz/FuzzOpen
// are values it sealed.
func fuzzKey(t testing.TB) *dataKey {
	dk, err := newDataKey("d:k1", bytes.Repeat([]byte{0x42}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return dk
}

// FuzzOpen: opening arbitrary bytes never panics, and what opens is
// exactly what sealing its plaintext with the value's nonce gives back
// (nothing else in the value is ignored or accepted loosely).
func FuzzOpen(f *testing.F) {
	dk := fuzzKey(f)
	f.Add(dk.seal(KindMessage, "acme", []byte(`{"role":"user","content":"hi"}`)))
	f.Add(dk.sealFixed(KindSystem, "acme", []byte(`"system"`)))
	f.Add(dk.seal(KindEvent, "acme", []byte{}))
	f.Add([]byte{sealVersion})
	f.Add([]byte(`{"role":"user"}`))
	f.Fuzz(func(t *testing.T, v []byte) {
		for _, kind := range []Kind{KindMessage, KindSystem, KindEvent} {
			hdr, id, nonce, ct, err := parse(v)
			if err != nil {
				continue
			}
			if id != dk.id {
				continue
			}
			p, err := dk.open(kind, "acme", hdr, nonce, ct)
			if err != nil {
				continue
			}
			again := dk.aead.Seal(append(append([]byte{}, hdr...), nonce...), nonce, p, aad(hdr, kind, "acme"))
			if !bytes.Equal(again, v) {
				t.Fatalf("%x opened as %q, which seals to %x", v, p, again)
			}
		}
	})
}

// TestWriteFuzzSeeds rewrites testdata/fuzz/FuzzOpen from fuzzKey when
// SEALED_WRITE_SEEDS is set (the seeds are sealed values and their
// alterations).
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("SEALED_WRITE_SEEDS") == "" {
		t.Skip("set SEALED_WRITE_SEEDS=1 to rewrite the seeds")
	}
	dk := fuzzKey(t)
	good := dk.seal(KindMessage, "acme", []byte(`{"role":"user","content":"MARKER"}`))
	seeds := map[string][]byte{
		"message":   good,
		"system":    dk.sealFixed(KindSystem, "acme", []byte(`{"parts":[{"text":"be brief"}]}`)),
		"empty":     dk.seal(KindEvent, "acme", []byte{}),
		"flipped":   func() []byte { b := bytes.Clone(good); b[len(b)-3] ^= 4; return b }(),
		"truncated": good[:len(good)-1],
		"longid":    append([]byte{sealVersion, 0xff}, good[2:]...),
		"zeroid":    append([]byte{sealVersion, 0}, good[2:]...),
		"plaintext": []byte(`{"role":"user","content":"hi"}`),
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzOpen")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, v := range seeds {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", v)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
