package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chronicle-proxy/chronicle/proxy/config"
)

func newKEK(t *testing.T) string {
	k := make([]byte, 32)
	rand.Read(k)
	return base64.StdEncoding.EncodeToString(k)
}

// TestKeysRewrap: a store written under one key-encryption key, rotated
// to another (the old one listed in previous_keys), re-wrapped with
// chronicle keys rewrap, then opened with the new key alone: the thread
// reads back. A wrong key, or the old key dropped before the re-wrap,
// fails at start with an error naming store.encryption.key and no key.
func TestKeysRewrap(t *testing.T) {
	dir := t.TempDir()
	a, b := newKEK(t), newKEK(t)
	conf := func(enc string) string {
		path := filepath.Join(t.TempDir(), "chronicle.yaml")
		cfg := "store:\n  driver: embedded\n  path: " + dir + "\n  encryption:\n" + enc +
			"connections:\n  - {name: openai, provider: openai, base_url: \"http://127.0.0.1:9\"}\n"
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	open := func(path string) error {
		cfg, err := config.Load(path)
		if err != nil {
			return err
		}
		st, err := openStore(context.Background(), cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		sst, err := sealStore(context.Background(), st, st, cfg)
		if err == nil {
			seedCLI(t, sst, 0)
		}
		return err
	}
	t.Setenv("CHRONICLE_KEK", a)
	first := conf("    enabled: true\n    key: ${CHRONICLE_KEK}\n    key_id: one\n")
	if err := open(first); err != nil {
		t.Fatal(err)
	}

	wrong := conf("    enabled: true\n    key: " + newKEK(t) + "\n    key_id: one\n")
	if err := open(wrong); err == nil || !strings.Contains(err.Error(), "store.encryption.key") || !strings.Contains(err.Error(), "does not open") {
		t.Fatalf("a wrong key: %v", err)
	}
	dropped := conf("    enabled: true\n    key: " + b + "\n    key_id: two\n")
	if err := open(dropped); err == nil || !strings.Contains(err.Error(), `"one"`) {
		t.Fatalf("the old key dropped before the rewrap: %v", err)
	}
	keyFile := filepath.Join(t.TempDir(), "kek")
	if err := os.WriteFile(keyFile, []byte(b+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rotated := conf("    enabled: true\n    key_file: " + keyFile + "\n    key_id: two\n    previous_keys:\n      - {id: one, key: " + a + "}\n")
	code, out, errOut := runCLI(t, "keys", "rewrap", "--config", rotated)
	if code != 0 || !strings.Contains(out, `3 data keys: 3 re-wrapped under key "two"`) {
		t.Fatalf("rewrap: %d %q %q", code, out, errOut)
	}
	code, out, _ = runCLI(t, "keys", "rewrap", "--config", rotated)
	if code != 0 || !strings.Contains(out, "0 re-wrapped") {
		t.Fatalf("rewrap again: %d %q", code, out)
	}
	code, out, errOut = runCLI(t, "threads", "show", "--config", dropped, "acme", "tool-thread")
	if code != 0 || !strings.Contains(out, "weather in Paris?") {
		t.Fatalf("show under the new key alone: %d %q %q", code, out, errOut)
	}
	// No key appears in any output.
	for _, s := range []string{out, errOut} {
		if strings.Contains(s, a) || strings.Contains(s, b) {
			t.Fatal("a key in the output")
		}
	}
	// Nothing in the store's files in clear.
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			raw, _ := os.ReadFile(path)
			if bytes.Contains(raw, []byte("weather in Paris")) {
				t.Errorf("%s holds a message in clear", path)
			}
		}
		return err
	})
}

// TestEncryptionConfigErrors: each problem names its key, never the value.
func TestEncryptionConfigErrors(t *testing.T) {
	base := "connections:\n  - {name: openai, provider: openai, base_url: \"http://127.0.0.1:9\"}\nstore:\n  encryption:\n"
	secret := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcde")) // 31 bytes
	for _, tc := range []struct{ enc, want string }{
		{"    enabled: true\n", "store.encryption.key: required"},
		{"    enabled: true\n    key: " + secret + "\n", "store.encryption.key: want 32 bytes"},
		{"    enabled: true\n    key: not-base64!\n", "store.encryption.key: want 32 bytes in base64"},
		{"    enabled: true\n    key_file: /nonexistent/kek\n", "store.encryption.key_file:"},
		{"    enabled: true\n    key: " + newKEK(t) + "\n    key_id: 'a b'\n", "store.encryption.key_id:"},
		{"    enabled: true\n    key: " + newKEK(t) + "\n    previous_keys: [{id: '1', key: " + newKEK(t) + "}]\n", "store.encryption.previous_keys[0].id: key id \"1\" is given twice"},
		{"    enabled: true\n    key: " + newKEK(t) + "\n    previous_keys: [{id: '0'}]\n", "store.encryption.previous_keys[0].key: required"},
		{"    plaintext: maybe\n", "store.encryption.plaintext: want read or refuse"},
		{"    enabled: true\n    key: ${CHRONICLE_TEST_NO_SUCH_KEK}\n", "CHRONICLE_TEST_NO_SUCH_KEK is not set"},
	} {
		_, err := config.Parse([]byte(base+tc.enc), func(string) (string, bool) { return "", false })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.enc, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("%q: the key is in the error", tc.enc)
		}
	}
}
