package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/chronicle-proxy/chronicle/store/sealed"
)

// sealedOver wraps st with encryption at rest under a fresh
// key-encryption key, as chronicle serve does with store.encryption on.
func sealedOver(t testing.TB, st store.Store) store.Store {
	t.Helper()
	k := make([]byte, 32)
	rand.Read(k)
	ring, err := sealed.NewKeyring(st.(store.Keys), sealed.KEK{ID: "test", Key: k})
	if err != nil {
		t.Fatal(err)
	}
	if err := ring.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	return sealed.Wrap(st, ring, sealed.Options{})
}

// TestEncryptionChangesNothing plays TestThreadCacheChangesNothing's
// conversation per wire format and store without encryption, with it and
// the thread cache, and with it and no cache: the same upstream bodies,
// headers and stored threads. Keyed hashes still match (the cache hits
// every turn after the first, prefix matching keeps the stored prefix).
func TestEncryptionChangesNothing(t *testing.T) {
	for _, d := range cacheDialects {
		for _, b := range backends {
			t.Run(d.name+"/"+b.name, func(t *testing.T) {
				var runs [3][]string
				for i, tc := range []struct {
					seal  bool
					cache int
				}{{false, 1 << 20}, {true, 1 << 20}, {true, 0}} {
					m := startMock(t)
					st := b.open(t)
					if tc.seal {
						st = sealedOver(t, st)
					}
					cfg := persistConfig + fmt.Sprintf("store: {thread_cache_bytes: %d}\n", tc.cache)
					p := startProxyWith(t, m, cfg, st)
					if tc.seal && p.hashKeys == nil {
						t.Fatal("the proxy does not key hashes over a sealed store")
					}
					runs[i] = conversation(t, d, p, &testMock{m})
					if tc.cache > 0 {
						if hits, misses := p.threads.hits.Load(), p.threads.misses.Load(); hits != 9 || misses != 0 {
							t.Fatalf("seal=%v: thread cache: %d hits, %d misses; want 9, 0", tc.seal, hits, misses)
						}
					}
				}
				for r := 1; r < 3; r++ {
					if len(runs[0]) != len(runs[r]) {
						t.Fatalf("%d steps in the clear, %d sealed (%d)", len(runs[0]), len(runs[r]), r)
					}
					for i := range runs[0] {
						if runs[0][i] != runs[r][i] {
							t.Errorf("step %d differs (%d)\nin the clear: %s\nsealed:       %s", i, r, runs[0][i], runs[r][i])
						}
					}
				}
			})
		}
	}
}

const sealedConfig = `
leases: {ttl: 3s}
admin: {token: adm}
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}", audit: {upstream_body: true}}
  - {name: deepseek, provider: deepseek, base_url: "${MOCK}", audit: {upstream_body: true}}
  - {name: gemini, provider: gemini, base_url: "${MOCK}", audit: {upstream_body: true}}
  - {name: claude, provider: anthropic, base_url: "${MOCK}", audit: {upstream_body: true}}
`

const sealMarker = "MARKER-5e41ed-the-users-secret"

// TestEncryptionNothingInClear sends a turn per wire format, stream and
// not, whose message carries a marker, through a proxy over a sealed
// store (upstream bodies audited); reads each thread back through /api;
// then reads the raw store (every Redis key and value of every type, on
// one node and on a cluster; every file of the embedded store) and finds
// neither the marker nor any 64-byte piece of a stored reply in it.
func TestEncryptionNothingInClear(t *testing.T) {
	type turn struct{ path, body string }
	turns := []turn{
		{"/openai/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"` + sealMarker + `"}]}`},
		{"/openai/v1/chat/completions", `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"` + sealMarker + `"}]}`},
		{"/deepseek/chat/completions", `{"model":"deepseek-chat","stream":true,"messages":[{"role":"user","content":"` + sealMarker + `"}]}`},
		{"/gemini/v1beta/models/gemini-3-flash-preview:generateContent", `{"contents":[{"role":"user","parts":[{"text":"` + sealMarker + `"}]}],"systemInstruction":{"parts":[{"text":"` + sealMarker + ` system"}]}}`},
		{"/gemini/v1beta/models/gemini-3-flash-preview:streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"text":"` + sealMarker + `"}]}]}`},
		{"/openai/v1/responses", `{"model":"gpt-5.1-codex-max","input":[{"type":"message","role":"user","content":"` + sealMarker + `"}]}`},
		{"/openai/v1/responses", `{"model":"gpt-5.1-codex-max","stream":true,"input":[{"type":"message","role":"user","content":"` + sealMarker + `"}]}`},
		{"/claude/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"` + sealMarker + `"}]}`},
		{"/claude/v1/messages", `{"model":"claude-sonnet-4-5","max_tokens":1024,"stream":true,"messages":[{"role":"user","content":"` + sealMarker + `"}]}`},
	}
	play := func(t *testing.T, st store.Store) (replies [][]byte) {
		m := startMock(t)
		p := startProxyWith(t, m, sealedConfig, sealedOver(t, st))
		for i, tc := range turns {
			thread := fmt.Sprintf("t-sealed-%d", i)
			hdr := []string{"Authorization", "Bearer k1", "X-Goog-Api-Key", "k1", "X-Api-Key", "k1", "Anthropic-Version", "2023-06-01", "X-Thread-Id", thread}
			resp, body := do(t, "POST", p.URL+tc.path, tc.body, hdr...)
			if resp.StatusCode != 200 {
				t.Fatalf("%s: %d %s", tc.path, resp.StatusCode, body)
			}
			th := apiThread(t, p, "k1", thread)
			msgs := th.Get("messages").Array()
			if len(msgs) < 2 || !strings.Contains(msgs[0].Raw, sealMarker) {
				t.Fatalf("%s: thread read back %s", tc.path, th.Raw)
			}
			replies = append(replies, []byte(msgs[len(msgs)-1].Raw))
			// The run, with its upstream body, reads back too.
			run := resp.Header.Get("X-Run-Id")
			r, rb := do(t, "GET", p.URL+"/admin/threads/"+passThroughTenant([]byte("k1"))+"/"+thread+"/runs/"+run, "", "Authorization", "Bearer adm")
			if r.StatusCode != 200 || !bytes.Contains(rb, []byte(sealMarker)) {
				t.Fatalf("%s: run read back: %d %s", tc.path, r.StatusCode, rb)
			}
		}
		return replies
	}
	inClear := func(t *testing.T, where string, raw []byte, replies [][]byte) {
		t.Helper()
		if bytes.Contains(raw, []byte("MARKER-5e41ed")) {
			t.Errorf("%s holds the marker in clear", where)
		}
		for _, r := range replies {
			for i := 0; i+64 <= len(r); i += 16 {
				if bytes.Contains(raw, r[i:i+64]) {
					t.Errorf("%s holds a piece of a reply in clear: %q", where, r[i:i+64])
					return
				}
			}
		}
	}
	t.Run("embedded", func(t *testing.T) {
		dir := t.TempDir()
		st := openEmbedded(t, dir)
		replies := play(t, st)
		st.Close()
		files := 0
		filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			files++
			inClear(t, path, b, replies)
			return nil
		})
		if files < 3 {
			t.Fatalf("%d files scanned", files)
		}
	})
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (string, goredis.UniversalClient)
	}{
		{"redis", func(t *testing.T) (string, goredis.UniversalClient) {
			srv := redistest.Start(t)
			return srv.URL(), srv.Client(t)
		}},
		{"cluster", func(t *testing.T) (string, goredis.UniversalClient) {
			c := redistest.StartCluster(t, 3)
			return "redis+cluster://" + strings.Join(c.Addrs(), ","), c.ClusterClient(t)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, client := tc.open(t)
			replies := play(t, openRedis(t, url))
			vals := redistest.DumpAll(t, client)
			if len(vals) < 20 {
				t.Fatalf("%d keys scanned", len(vals))
			}
			for k, v := range vals {
				inClear(t, "key "+k, []byte(k+"\x00"+v), replies)
			}
		})
	}
}

// failingHashKeys is a store whose tenants' hash keys fail with err.
type failingHashKeys struct {
	store.Store
	err error
}

func (f failingHashKeys) HashKey(context.Context, string) (func(store.Hash) store.Hash, error) {
	return nil, f.err
}

// TestHashKeyFailure: a tenant's keys that cannot be read because the
// store is away is an outage (503 store_unavailable, or forwarded
// unstored under on_store_error: pass); keys that are there but do not
// open are a 500 internal_error under either setting, and the request
// does not go upstream.
func TestHashKeyFailure(t *testing.T) {
	const cfg = `
connections:
  - {name: openai, provider: openai, base_url: "${MOCK}"}
  - {name: passing, provider: openai, base_url: "${MOCK}", on_store_error: pass}
`
	for _, tc := range []struct {
		name, conn string
		err        error
		status     int
		code       string
		upstream   bool
	}{
		{"store away", "openai", fmt.Errorf("redis: dial: %w", store.ErrUnavailable), 503, "store_unavailable", false},
		{"store away, pass", "passing", fmt.Errorf("redis: dial: %w", store.ErrUnavailable), 200, "", true},
		{"key does not open", "openai", errors.New("sealed: key d:1 of tenant t does not open"), 500, "internal_error", false},
		{"key does not open, pass", "passing", errors.New("sealed: key d:1 of tenant t does not open"), 500, "internal_error", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMock(t)
			p := startProxyOpts(t, m, cfg, Options{Store: failingHashKeys{openEmbedded(t, t.TempDir()), tc.err}})
			resp, out := do(t, "POST", p.URL+"/"+tc.conn+"/v1/chat/completions",
				`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`, "Authorization", "Bearer k")
			if resp.StatusCode != tc.status || gjson.GetBytes(out, "error.code").String() != tc.code {
				t.Fatalf("answered %d %s; want %d %s", resp.StatusCode, out, tc.status, tc.code)
			}
			if got := len(m.Requests()) > 0; got != tc.upstream {
				t.Fatalf("went upstream: %v, want %v", got, tc.upstream)
			}
		})
	}
}
