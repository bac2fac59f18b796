package mock

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// readEvent reads one SSE event (up to and including "\n\n").
func readEvent(t *testing.T, br *bufio.Reader) []byte {
	t.Helper()
	var ev []byte
	for !bytes.HasSuffix(ev, []byte("\n\n")) {
		line, err := br.ReadBytes('\n')
		ev = append(ev, line...)
		if err != nil {
			t.Fatalf("reading event: %v (got %q)", err, ev)
		}
	}
	return ev
}

func TestCutAfter(t *testing.T) {
	s := startMock(t)
	path, body := streamRequest(provOpenAI, true)
	resp, err := http.DefaultClient.Do(newReq(t, context.Background(), s, path, body, hdr{"X-Mock-Cut-After", "2"}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatal("a cut stream ended cleanly")
	}
	events := splitEvents(fx(t, "openai-chat/text.sse"), "\n\n")
	if want := append(append([]byte(nil), events[0]...), events[1]...); !bytes.Equal(got, want) {
		t.Errorf("got %q, want the first two events", got)
	}
	if err := s.WaitRequests(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if r := s.Requests()[0]; !r.Cut || r.Canceled || !r.Done {
		t.Errorf("recorded %+v", r)
	}

	// Non-stream: cut after N body bytes.
	resp, err = http.DefaultClient.Do(newReq(t, context.Background(), s, pathChat, []byte(`{"model":"gpt-4o","messages":[]}`), hdr{"X-Mock-Cut-After", "10"}))
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(got, fx(t, "openai-chat/text.json")[:10]) {
		t.Errorf("non-stream cut: err %v, got %q", err, got)
	}
}

// TestGate proves the first event reaches the client while the second is
// held, and that a gate released beforehand does not block.
func TestGate(t *testing.T) {
	s, waits := startHooked(t)
	path, body := streamRequest(provOpenAI, true)
	resp, err := http.DefaultClient.Do(newReq(t, context.Background(), s, path, body, hdr{"X-Mock-Gate", "g1"}))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	events := splitEvents(fx(t, "openai-chat/text.sse"), "\n\n")
	if got := readEvent(t, br); !bytes.Equal(got, events[0]) {
		t.Fatalf("first event %q", got)
	}
	if kind := <-waits; kind != "gate" {
		t.Fatalf("wait kind %q", kind)
	}
	if s.InFlight() != 1 || s.Requests()[0].Done {
		t.Fatalf("the gated request is not held: in flight %d", s.InFlight())
	}
	s.Release("g1")
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if want := fx(t, "openai-chat/text.sse")[len(events[0]):]; !bytes.Equal(rest, want) {
		t.Error("rest of the stream differs from the fixture")
	}

	s.Release("pre")
	resp2, got := post(t, s, path, body, "X-Mock-Gate", "pre")
	if resp2.StatusCode != 200 || !bytes.Equal(got, fx(t, "openai-chat/text.sse")) {
		t.Error("pre-released gate: incomplete stream")
	}
	// Over HTTP, as a separate process would.
	resp3, err := http.Post(s.URL()+"/_mock/release?gate=g2", "", nil)
	if err != nil || resp3.StatusCode != http.StatusNoContent {
		t.Fatalf("release endpoint: %v %v", err, resp3)
	}
	resp3.Body.Close()
	if r, _ := post(t, s, pathChat, []byte(`{"model":"gpt-4o","messages":[]}`), "X-Mock-Gate", "g2"); r.StatusCode != 200 {
		t.Error("gate released over HTTP still blocks")
	}
}

func TestStatusKnob(t *testing.T) {
	s := startMock(t)
	gem := []byte(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`)
	chat := []byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`)
	tests := []struct {
		name       string
		path       string
		body       []byte
		header     []string
		wantStatus int
		wantBody   []byte
		wantSub    string
	}{
		{"gemini rate limit fixture", pathGemini3, gem, []string{"X-Mock-Status", "429", "X-Mock-Error-Body", "error.rate-limit", "X-Mock-Retry-After", "2"}, 429, fx(t, "gemini/error.rate-limit.json"), ""},
		{"gemini 503 composed", pathGemini3, gem, []string{"X-Mock-Status", "503", "X-Mock-Retry-After", "2"}, 503, nil, `"status": "UNAVAILABLE"`},
		{"openai 503", pathChat, chat, []string{"X-Mock-Status", "503", "X-Mock-Retry-After", "2"}, 503, nil, `"type": "server_error"`},
		{"openai quota fixture", pathChat, chat, []string{"X-Mock-Status", "429", "X-Mock-Error-Body", "insufficient-quota", "X-Mock-Retry-After", "2"}, 429, fx(t, "openai-chat/error.insufficient-quota.json"), ""},
		{"deepseek 402", pathDeepSeek, []byte(`{"model":"deepseek-chat","messages":[]}`), []string{"X-Mock-Status", "402", "X-Mock-Retry-After", "2"}, 402, fx(t, "deepseek/error.insufficient-balance.json"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := post(t, s, tt.path, tt.body, tt.header...)
			if resp.StatusCode != tt.wantStatus || resp.Header.Get("Retry-After") != "2" {
				t.Fatalf("status %d retry-after %q", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			if tt.wantBody != nil {
				if diff := cmp.Diff(string(tt.wantBody), string(body)); diff != "" {
					t.Errorf("(-want +got):\n%s", diff)
				}
			} else if !bytes.Contains(body, []byte(tt.wantSub)) {
				t.Errorf("body lacks %q: %s", tt.wantSub, body)
			}
		})
	}
	for _, h := range [][]string{{"X-Mock-Status", "abc"}, {"X-Mock-Chunk-Delay", "soon"}, {"X-Mock-Status", "500", "X-Mock-Error-Body", "nope"}} {
		if resp, body := post(t, s, pathChat, chat, h...); resp.StatusCode != 400 || !bytes.Contains(body, []byte("mock_error")) {
			t.Errorf("%v: %d %s", h, resp.StatusCode, body)
		}
	}
}

// TestClientGoesAway: a client that leaves during a gate, a chunk delay or
// a first-byte delay marks the request Canceled and frees its slot.
func TestClientGoesAway(t *testing.T) {
	path, body := streamRequest(provOpenAI, true)
	tests := []struct {
		name      string
		header    hdr
		readFirst bool
	}{
		{"gate", hdr{"X-Mock-Gate", "never"}, true},
		{"chunk delay", hdr{"X-Mock-Chunk-Delay", "1h"}, true},
		{"first byte delay", hdr{"X-Mock-First-Byte-Delay", "1h"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, waits := startHooked(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			req := newReq(t, ctx, s, path, body, tt.header)
			go func() {
				defer close(done)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				defer resp.Body.Close()
				if tt.readFirst {
					_, _ = bufio.NewReader(resp.Body).ReadBytes('\n')
				}
				<-ctx.Done()
			}()
			<-waits // the handler is blocked now
			cancel()
			<-done
			if err := s.WaitRequests(context.Background(), 1); err != nil {
				t.Fatal(err)
			}
			r := s.Requests()[0]
			if !r.Canceled || !r.Done || s.InFlight() != 0 {
				t.Errorf("canceled=%v done=%v in flight=%d", r.Canceled, r.Done, s.InFlight())
			}
		})
	}
}

// TestMaxInFlight holds k requests on a gate, checks the counters, then
// releases them.
func TestMaxInFlight(t *testing.T) {
	s, waits := startHooked(t)
	const k = 8
	var wg sync.WaitGroup
	statuses := make(chan int, k)
	for range k {
		wg.Add(1)
		req := newReq(t, context.Background(), s, pathChat, []byte(`{"model":"gpt-4o","messages":[]}`), hdr{"X-Mock-Gate", "mx"})
		go func() {
			defer wg.Done()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				statuses <- 0
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	for range k {
		<-waits
	}
	if s.InFlight() != k || s.MaxInFlight() != k {
		t.Fatalf("in flight %d, max %d, want %d", s.InFlight(), s.MaxInFlight(), k)
	}
	var stats map[string]int
	resp, err := http.Get(s.URL() + "/_mock/stats")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&stats)
	resp.Body.Close()
	if diff := cmp.Diff(map[string]int{"in_flight": k, "max_in_flight": k, "requests": k}, stats); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
	s.Release("mx")
	wg.Wait()
	close(statuses)
	for st := range statuses {
		if st != 200 {
			t.Errorf("status %d", st)
		}
	}
	if err := s.WaitRequests(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	if s.InFlight() != 0 || s.MaxInFlight() != k {
		t.Errorf("after: in flight %d, max %d", s.InFlight(), s.MaxInFlight())
	}
	s.Reset()
	if s.MaxInFlight() != 0 || len(s.Requests()) != 0 {
		t.Error("Reset kept state")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.WaitRequests(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitRequests after Reset: %v", err)
	}
}

func TestControlRequests(t *testing.T) {
	s := startMock(t)
	post(t, s, pathChat, []byte(`{"model":"gpt-4o","messages":[]}`), "X-Goog-Api-Key", "gk")
	resp, err := http.Get(s.URL() + "/_mock/requests")
	if err != nil {
		t.Fatal(err)
	}
	var list []struct {
		Path, Body, Provider, Scenario string
		Header                         http.Header
		Status                         int
		Done                           bool
	}
	err = json.NewDecoder(resp.Body).Decode(&list)
	resp.Body.Close()
	if err != nil || len(list) != 1 {
		t.Fatalf("%v %v", err, list)
	}
	got := list[0]
	if got.Path != pathChat || got.Body != `{"model":"gpt-4o","messages":[]}` || got.Provider != "openai-chat" ||
		got.Scenario != "text" || got.Status != 200 || !got.Done || got.Header.Get("X-Goog-Api-Key") != "gk" {
		t.Errorf("recorded %+v", got)
	}
	r, err := http.Post(s.URL()+"/_mock/reset", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if len(s.Requests()) != 0 {
		t.Error("reset endpoint kept the log")
	}
}
