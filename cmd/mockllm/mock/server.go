// Package mock is a deterministic, strict mock LLM upstream for tests,
// benchmarks and demos. It speaks OpenAI chat completions, DeepSeek, Gemini
// (native and OpenAI-compatible), OpenAI Responses and Anthropic Messages
// (with verifiable thinking signatures and a prompt-cache simulation) on
// their real paths, replays the provider fixtures of cmd/mockllm/fixtures
// byte for byte, rejects request histories the real providers reject (with
// their status and error body), injects faults through X-Mock-* request
// headers, and records every request.
//
// It deliberately shares no code with adapters/ or repair/: a mock that
// reused the parsers it tests would hide their bugs.
package mock

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxBody bounds a request body the mock reads.
const maxBody = 64 << 20

// Options configures a Server. The zero value is ready to use.
type Options struct {
	// MaxRecorded caps the request log (oldest entries are dropped first);
	// 0 keeps every request. Long load runs should set it.
	MaxRecorded int
}

// Request is one recorded request and how the mock answered it.
type Request struct {
	Method   string
	Path     string
	RawQuery string
	Header   http.Header
	Body     []byte
	// Provider is the fixture folder the request was routed to
	// ("openai-chat", "deepseek", "gemini", "gemini-openai",
	// "openai-responses", "anthropic"); "" for unknown paths.
	Provider string
	// Scenario is the fixture base name (or "synthetic") that was replayed.
	Scenario string
	// Rule names the strictness rule or knob that rejected the request
	// ("auth", "invalid-json", "chat-unanswered-tool-calls", "knob-status",
	// ...); "" when the request was answered normally.
	Rule string
	// Status is the HTTP status the mock answered (0 if none was written).
	Status int
	// Cut is true when X-Mock-Cut-After ended the answer abruptly.
	Cut bool
	// Canceled is true when the client went away before the mock finished.
	Canceled bool
	// Done is true once the mock has finished with the request, whatever the
	// outcome (also when Canceled or Cut).
	Done bool
}

// entry is a log slot; its fields change under Server.mu.
type entry struct {
	req Request
	gen uint64
}

type gate struct {
	ch       chan struct{}
	released bool
	// waited counts the requests that blocked on the gate; arrived is
	// closed and replaced whenever it grows.
	waited  int
	arrived chan struct{}
}

// Server is a running mock upstream. All methods are safe for concurrent use.
type Server struct {
	opts Options
	ln   net.Listener
	srv  *http.Server
	url  string

	inFlight    atomic.Int64
	maxInFlight atomic.Int64

	mu       sync.Mutex
	log      []*entry
	gen      uint64
	finished int           // requests of the current generation that are Done
	changed  chan struct{} // closed and replaced whenever finished grows
	gates    map[string]*gate
	closed   bool
	handlers sync.WaitGroup

	// anth is what the Anthropic flavour remembers across requests.
	anth *anthropicState

	done chan struct{} // closed by Close: ends every delay and gate
	// waitHook, when set (tests only), is called as a handler starts to
	// block on a delay ("delay") or a gate ("gate"); set before serving.
	waitHook  func(kind string)
	closeOnce sync.Once
	closeErr  error
}

// Start listens on addr (for example "127.0.0.1:0") and serves the mock
// until Close.
func Start(addr string, opts Options) (*Server, error) {
	return start(addr, opts, nil)
}

func start(addr string, opts Options, waitHook func(string)) (*Server, error) {
	if err := load(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("mock: listen %s: %w", addr, err)
	}
	s := &Server{
		opts:     opts,
		ln:       ln,
		url:      "http://" + ln.Addr().String(),
		changed:  make(chan struct{}),
		gates:    map[string]*gate{},
		done:     make(chan struct{}),
		anth:     newAnthropicState(),
		waitHook: waitHook,
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// URL returns the base URL, "http://127.0.0.1:PORT".
func (s *Server) URL() string { return s.url }

// Close stops the server, ends every pending delay and gate, and waits for
// the handlers to return.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.done)
		s.closeErr = s.srv.Close()
		s.handlers.Wait()
	})
	return s.closeErr
}

// Requests returns a copy of the request log, oldest first.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.log))
	for i, e := range s.log {
		r := e.req
		r.Header = r.Header.Clone()
		r.Body = append([]byte(nil), r.Body...)
		out[i] = r
	}
	return out
}

// WaitRequests blocks until n requests recorded since the last Reset have
// finished (Done, including canceled ones), or ctx ends.
func (s *Server) WaitRequests(ctx context.Context, n int) error {
	for {
		s.mu.Lock()
		if s.finished >= n {
			s.mu.Unlock()
			return nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("mock: waiting for %d finished requests: %w", n, ctx.Err())
		}
	}
}

// InFlight returns the number of requests being handled now.
func (s *Server) InFlight() int { return int(s.inFlight.Load()) }

// MaxInFlight returns the highest InFlight seen since Start or Reset.
func (s *Server) MaxInFlight() int { return int(s.maxInFlight.Load()) }

// Reset clears the request log and the finished count, sets MaxInFlight to
// the current InFlight, forgets released gates (so a name can be used
// again), and empties the Anthropic prompt cache and the memory of emitted
// thinking blocks. Gates with waiting requests stay closed until released.
func (s *Server) Reset() {
	s.anth.reset()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = nil
	s.gen++
	s.finished = 0
	s.maxInFlight.Store(s.inFlight.Load())
	for name, g := range s.gates {
		if g.released {
			delete(s.gates, name)
		}
	}
}

// Release opens the gate name: requests blocked on it continue, and later
// requests naming it do not block (until Reset).
func (s *Server) Release(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.gateLocked(name)
	if !g.released {
		g.released = true
		close(g.ch)
	}
}

func (s *Server) gateLocked(name string) *gate {
	g := s.gates[name]
	if g == nil {
		g = &gate{ch: make(chan struct{}), arrived: make(chan struct{})}
		s.gates[name] = g
	}
	return g
}

// WaitGated waits until n requests have reached the gate name (blocked on
// it, or passed it once it was released), or ctx ends.
func (s *Server) WaitGated(ctx context.Context, name string, n int) error {
	for {
		s.mu.Lock()
		g := s.gateLocked(name)
		waited, arrived := g.waited, g.arrived
		s.mu.Unlock()
		if waited >= n {
			return nil
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			return fmt.Errorf("mock: waiting for %d requests at gate %q (%d so far): %w", n, name, waited, ctx.Err())
		}
	}
}

// waitGate blocks until the gate is released; false when the client went
// away or the server closed first.
func (s *Server) waitGate(ctx context.Context, name string) bool {
	s.mu.Lock()
	g := s.gateLocked(name)
	ch := g.ch
	g.waited++
	close(g.arrived)
	g.arrived = make(chan struct{})
	s.mu.Unlock()
	if s.waitHook != nil {
		s.waitHook("gate")
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
	case <-s.done:
	}
	return false
}

// sleep waits d; false when the client went away or the server closed first.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	if s.waitHook != nil {
		s.waitHook("delay")
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
	case <-s.done:
	}
	return false
}

func (s *Server) record(r *http.Request, body []byte) *entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &entry{gen: s.gen, req: Request{
		Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		Header: r.Header.Clone(), Body: body,
	}}
	if s.opts.MaxRecorded > 0 && len(s.log) >= s.opts.MaxRecorded {
		n := copy(s.log, s.log[len(s.log)-s.opts.MaxRecorded+1:])
		s.log = s.log[:n]
	}
	s.log = append(s.log, e)
	return e
}

func (s *Server) update(e *entry, f func(*Request)) {
	s.mu.Lock()
	f(&e.req)
	s.mu.Unlock()
}

func (s *Server) finish(e *entry, canceled bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e.req.Done = true
	e.req.Canceled = e.req.Canceled || canceled
	if e.gen == s.gen {
		s.finished++
		close(s.changed)
		s.changed = make(chan struct{})
	}
}

// ServeHTTP routes control endpoints and provider calls.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/_mock/") {
		s.control(w, r)
		return
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		http.Error(w, "mockllm: closing", http.StatusServiceUnavailable)
		return
	}
	s.handlers.Add(1)
	s.mu.Unlock()
	defer s.handlers.Done()

	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxInFlight.Load()
		if n <= m || s.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}

	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	e := s.record(r, body)
	h := &handling{s: s, w: w, r: r, e: e, body: body, k: knobs{cutAfter: -1}}
	defer func() { s.finish(e, h.canceled || r.Context().Err() != nil && !h.completed) }()
	if err != nil {
		h.canceled = true
		return
	}
	h.serve()
}

// control serves the /_mock/ endpoints for tests that drive a separate process.
func (s *Server) control(w http.ResponseWriter, r *http.Request) {
	type jsonRequest struct {
		Method   string      `json:"method"`
		Path     string      `json:"path"`
		RawQuery string      `json:"raw_query"`
		Header   http.Header `json:"header"`
		Body     string      `json:"body"`
		Provider string      `json:"provider"`
		Scenario string      `json:"scenario"`
		Rule     string      `json:"rule"`
		Status   int         `json:"status"`
		Cut      bool        `json:"cut"`
		Canceled bool        `json:"canceled"`
		Done     bool        `json:"done"`
	}
	writeJSON := func(v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	switch {
	case r.URL.Path == "/_mock/requests" && r.Method == http.MethodGet:
		reqs := s.Requests()
		out := make([]jsonRequest, len(reqs))
		for i, q := range reqs {
			out[i] = jsonRequest{q.Method, q.Path, q.RawQuery, q.Header, string(q.Body), q.Provider, q.Scenario, q.Rule, q.Status, q.Cut, q.Canceled, q.Done}
		}
		writeJSON(out)
	case r.URL.Path == "/_mock/stats" && r.Method == http.MethodGet:
		s.mu.Lock()
		n := len(s.log)
		s.mu.Unlock()
		writeJSON(map[string]int{"in_flight": s.InFlight(), "max_in_flight": s.MaxInFlight(), "requests": n})
	case r.URL.Path == "/_mock/reset" && r.Method == http.MethodPost:
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/_mock/release" && r.Method == http.MethodPost:
		name := r.URL.Query().Get("gate")
		if name == "" {
			http.Error(w, "mockllm: gate parameter required", http.StatusBadRequest)
			return
		}
		s.Release(name)
		w.WriteHeader(http.StatusNoContent)
	default:
		http.Error(w, "mockllm: unknown control endpoint", http.StatusNotFound)
	}
}
