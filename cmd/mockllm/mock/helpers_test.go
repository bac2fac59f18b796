package mock

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"net/http"
	"testing"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/fixtures"
	"github.com/tidwall/sjson"
)

func startMock(t testing.TB) *Server {
	t.Helper()
	s, err := Start("127.0.0.1:0", Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// startHooked starts a mock that sends "delay"/"gate" on waits as a handler
// begins to block, so tests synchronise without sleeping.
func startHooked(t testing.TB) (*Server, chan string) {
	t.Helper()
	waits := make(chan string, 64)
	s, err := start("127.0.0.1:0", Options{}, func(kind string) { waits <- kind })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, waits
}

func fx(t testing.TB, path string) []byte {
	t.Helper()
	b, err := fs.ReadFile(fixtures.FS, "providers/"+path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// edit applies sjson edits: pairs of path and value; a nil value deletes.
func edit(t testing.TB, body []byte, pairs ...any) []byte {
	t.Helper()
	for i := 0; i < len(pairs); i += 2 {
		var err error
		path := pairs[i].(string)
		if pairs[i+1] == nil {
			body, err = sjson.DeleteBytes(body, path)
		} else {
			body, err = sjson.SetBytes(body, path, pairs[i+1])
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return body
}

// hdr is a list of header name/value pairs.
type hdr []string

func newReq(t testing.TB, ctx context.Context, s *Server, path string, body []byte, h hdr) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	hasKey, hasVersion := false, false
	for i := 0; i < len(h); i += 2 {
		req.Header.Set(h[i], h[i+1])
		switch http.CanonicalHeaderKey(h[i]) {
		case "Authorization", "X-Api-Key", "X-Goog-Api-Key", "X-No-Key":
			hasKey = true
		case "Anthropic-Version", "X-No-Version":
			hasVersion = true
		}
	}
	if !hasKey {
		req.Header.Set("Authorization", "Bearer sk-test")
	}
	if !hasVersion && anthropicEndpoint(req.URL.Path) != "" {
		req.Header.Set("anthropic-version", "2023-06-01")
	}
	return req
}

// post sends a request with a default key (unless h sets a credential
// header or X-No-Key) and, on Anthropic paths, anthropic-version 2023-06-01
// (unless h sets it or X-No-Version); it returns the response and its whole
// body.
func post(t testing.TB, s *Server, path string, body []byte, h ...string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(newReq(t, context.Background(), s, path, body, h))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// get sends a GET with the same default headers as post.
func get(t testing.TB, s *Server, path string, h ...string) (*http.Response, []byte) {
	t.Helper()
	req := newReq(t, context.Background(), s, path, nil, h)
	req.Method = http.MethodGet
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}
