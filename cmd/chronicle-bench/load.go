package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// apiKey is the pass-through credential every request carries; the mock
// accepts any non-empty key and chronicle derives the tenant from it.
const apiKey = "sk-chronicle-bench"

// target is one endpoint the load is driven against.
type target struct {
	Name      string
	base      string // scheme://host:port plus a path prefix ("/pass")
	root      string // chronicle's scheme://host:port, for /debug/pprof (chronicle targets)
	proc      *child // the proxy process (the mock for "direct")
	aux       *child // a store process whose CPU is reported beside (redis)
	persisted bool
	short     string // for thread ids
	// fresh starts another process like proc, idle, for a check whose
	// baseline must not hold what the load phases left (the streams
	// check's RSS); nil: the check uses proc.
	fresh func() (*target, error)
}

// client sends requests to one target: fasthttp, one HostClient for sized
// answers and one that streams bodies.
type client struct {
	t      *target
	host   string
	prefix string
	plain  *fasthttp.HostClient
	stream *fasthttp.HostClient
}

func newClient(t *target, maxConns int) (*client, error) {
	u, err := url.Parse(t.base)
	if err != nil {
		return nil, err
	}
	mk := func(stream bool) *fasthttp.HostClient {
		return &fasthttp.HostClient{
			Addr: u.Host, MaxConns: maxConns, StreamResponseBody: stream,
			ReadTimeout: 60 * time.Second, WriteTimeout: 60 * time.Second,
			MaxIdleConnDuration: 30 * time.Second, NoDefaultUserAgentHeader: true,
			MaxResponseBodySize: 64 << 20, ReadBufferSize: 16 << 10,
			RetryIfErr: func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		}
	}
	return &client{t: t, host: u.Host, prefix: strings.TrimRight(u.Path, "/"), plain: mk(false), stream: mk(true)}, nil
}

func (c *client) close() {
	c.plain.CloseIdleConnections()
	c.stream.CloseIdleConnections()
}

// spec is one kind of request, built once: the body and headers never
// change within a phase (only the thread id does).
type spec struct {
	path    string
	body    []byte
	headers [][2]string
	stream  bool
	ref     []uint64 // stream: the event hashes a direct request receives
}

// sample is what one request measured.
type sample struct {
	lat    int64 // request sent to last byte
	ttfe   int64 // stream: to the first data event
	gap    int64 // stream: mean gap between data events
	gaps   []int64
	events int
	ok     bool
	err    string
}

// do sends one request; threadID and mode may be empty. keepGaps records
// every inter-event gap (head-of-line check).
func (c *client) do(sp *spec, threadID string, keepGaps bool) sample {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("POST")
	req.SetRequestURI("http://" + c.host + c.prefix + sp.path)
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	for _, h := range sp.headers {
		req.Header.Set(h[0], h[1])
	}
	if threadID != "" {
		req.Header.Set("X-Thread-Id", threadID)
	}
	req.SetBodyRaw(sp.body)

	start := time.Now()
	hc := c.plain
	if sp.stream {
		hc = c.stream
	}
	if err := hc.Do(req, resp); err != nil {
		return sample{lat: int64(time.Since(start)), err: "transport: " + shortErr(err)}
	}
	if !sp.stream {
		body := resp.Body()
		s := sample{lat: int64(time.Since(start))}
		switch {
		case resp.StatusCode() >= 300:
			s.err = fmt.Sprintf("status %d: %s", resp.StatusCode(), clip(body))
		case len(body) == 0:
			s.err = "empty body"
		default:
			s.ok = true
		}
		return s
	}
	defer resp.CloseBodyStream()
	if resp.StatusCode() >= 300 {
		body, _ := io.ReadAll(io.LimitReader(resp.BodyStream(), 512))
		return sample{lat: int64(time.Since(start)), err: fmt.Sprintf("status %d: %s", resp.StatusCode(), clip(body))}
	}
	s := readEvents(resp.BodyStream(), start, sp.ref, keepGaps)
	s.lat = int64(time.Since(start))
	return s
}

var brPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 32<<10) }}

// readEvents reads an SSE body, timing each data event and checking the
// sequence against ref (nil: only that the stream ended with [DONE]).
func readEvents(r io.Reader, start time.Time, ref []uint64, keepGaps bool) sample {
	br := brPool.Get().(*bufio.Reader)
	br.Reset(r)
	defer func() { br.Reset(nil); brPool.Put(br) }()
	var s sample
	var first, last time.Time
	var done bool
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			line = bytes.TrimRight(line, "\r\n")
			if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				now := time.Now()
				data = bytes.TrimSpace(data)
				if s.events == 0 {
					first = now
					s.ttfe = int64(now.Sub(start))
				} else if keepGaps {
					s.gaps = append(s.gaps, int64(now.Sub(last)))
				}
				last = now
				if ref != nil && s.err == "" {
					if s.events >= len(ref) {
						s.err = fmt.Sprintf("event %d beyond the %d expected", s.events, len(ref))
					} else if h := hashEvent(data); h != ref[s.events] {
						s.err = fmt.Sprintf("event %d differs from the direct stream: %s", s.events, clip(data))
					}
				}
				s.events++
				if bytes.Equal(data, []byte("[DONE]")) {
					done = true
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && s.err == "" {
				s.err = "read: " + shortErr(err)
			}
			break
		}
	}
	if s.events > 1 {
		s.gap = int64(last.Sub(first)) / int64(s.events-1)
	}
	switch {
	case s.err != "":
	case !done:
		s.err = fmt.Sprintf("stream ended after %d events without [DONE]", s.events)
	case ref != nil && s.events != len(ref):
		s.err = fmt.Sprintf("got %d events, the direct stream has %d", s.events, len(ref))
	default:
		s.ok = true
	}
	return s
}

func hashEvent(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}

// streamRef fetches the stream directly once and records its event hashes.
func streamRef(direct *client, sp *spec) ([]uint64, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod("POST")
	req.SetRequestURI("http://" + direct.host + sp.path)
	req.Header.Set("Authorization", "Bearer "+apiKey)
	for _, h := range sp.headers {
		if h[0] != "X-Mock-Chunk-Delay" {
			req.Header.Set(h[0], h[1])
		}
	}
	req.SetBodyRaw(sp.body)
	if err := direct.plain.Do(req, resp); err != nil {
		return nil, err
	}
	if resp.StatusCode() != 200 {
		return nil, fmt.Errorf("direct stream: status %d: %s", resp.StatusCode(), clip(resp.Body()))
	}
	var ref []uint64
	for _, line := range bytes.Split(resp.Body(), []byte("\n")) {
		if data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:")); ok {
			ref = append(ref, hashEvent(bytes.TrimSpace(data)))
		}
	}
	return ref, nil
}

func clip(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 160 {
		s = s[:160]
	}
	return s
}

// bodies builds the request bodies once.
func chatBody(messages []string, stream bool) []byte {
	var b bytes.Buffer
	b.WriteString(`{"model":"gpt-4o","messages":[`)
	b.WriteString(strings.Join(messages, ","))
	b.WriteString(`]`)
	if stream {
		b.WriteString(`,"stream":true`)
	}
	b.WriteString(`}`)
	return b.Bytes()
}

func userMsg(text string) string {
	return `{"role":"user","content":` + strconv.Quote(text) + `}`
}

func assistantMsg(text string) string {
	return `{"role":"assistant","content":` + strconv.Quote(text) + `}`
}

const filler = "The quick brown fox jumps over the lazy dog while the proxy writes every turn down. "

// history is n messages alternating user and assistant, ending with user.
func history(n int) []string {
	msgs := make([]string, n)
	for i := range msgs {
		text := fmt.Sprintf("message %d: %s%s", i, filler, filler)
		if (n-1-i)%2 == 0 {
			msgs[i] = userMsg(text)
		} else {
			msgs[i] = assistantMsg(text)
		}
	}
	return msgs
}

// mockHeaders selects the mock's synthetic scenario.
func mockHeaders(chunks int, delay time.Duration) [][2]string {
	h := [][2]string{{"X-Mock-Scenario", "synthetic"}, {"X-Mock-Chunks", strconv.Itoa(chunks)}}
	if delay > 0 {
		h = append(h, [2]string{"X-Mock-Chunk-Delay", delay.String()})
	}
	return h
}

// phaseResult is what one phase of load measured.
type phaseResult struct {
	samples  []sample
	pairs    []Pair // latency: direct, proxied
	ttfe     []Pair
	gap      []Pair
	okByTID  map[string]int
	elapsed  time.Duration
	dropped  int
	errCount int
	errs     []string
}

func (r *phaseResult) addErr(e string) {
	r.errCount++
	if len(r.errs) < 5 {
		r.errs = append(r.errs, e)
	}
}

// worker collects one goroutine's results without locks.
type worker struct {
	samples []sample
	pairs   []Pair
	ttfe    []Pair
	gap     []Pair
	okByTID map[string]int
	errs    int
	errMsg  []string
}

func (w *worker) record(s sample, tid string) {
	s.gaps = s.gaps[:len(s.gaps):len(s.gaps)]
	w.samples = append(w.samples, s)
	if s.ok {
		if tid != "" {
			w.okByTID[tid]++
		}
		return
	}
	w.errs++
	if len(w.errMsg) < 5 {
		w.errMsg = append(w.errMsg, s.err)
	}
}

// load is how one phase drives a target.
type load struct {
	proxied  *client
	direct   *client // set: paired (each request also sent directly)
	sp       *spec
	tid      func(w int) string // thread id per virtual user; nil: none
	conc     int
	rate     float64 // > 0: open loop at this rate
	pace     float64 // > 0 (closed loop): the users together send at most this many requests per second
	dur      time.Duration
	maxReq   int
	keepGaps bool
}

// one sends request i of worker w (and its direct twin when paired).
func (l *load) one(w *worker, wi, i int) {
	tid := ""
	if l.tid != nil {
		tid = l.tid(wi)
	}
	if l.direct == nil {
		w.record(l.proxied.do(l.sp, tid, l.keepGaps), tid)
		return
	}
	var d, p sample
	if i%2 == 0 {
		d = l.direct.do(l.sp, "", false)
		p = l.proxied.do(l.sp, tid, false)
	} else {
		p = l.proxied.do(l.sp, tid, false)
		d = l.direct.do(l.sp, "", false)
	}
	w.record(p, tid)
	if !d.ok {
		w.errs++
		if len(w.errMsg) < 5 {
			w.errMsg = append(w.errMsg, "direct: "+d.err)
		}
	}
	if d.ok && p.ok {
		w.pairs = append(w.pairs, Pair{d.lat, p.lat})
		if l.sp.stream {
			w.ttfe = append(w.ttfe, Pair{d.ttfe, p.ttfe})
			w.gap = append(w.gap, Pair{d.gap, p.gap})
		}
	}
}

// run drives the phase to its end (duration or request count) and merges
// the workers' results.
func (l *load) run() *phaseResult {
	limit := l.maxReq
	dur := l.dur
	if limit > 0 {
		dur = 60 * time.Second // a count-bound phase still ends
	}
	start := time.Now()
	end := start.Add(dur)
	var issued atomic.Int64
	next := func() (int, bool) {
		n := int(issued.Add(1)) - 1
		if limit > 0 && n >= limit {
			return 0, false
		}
		return n, time.Now().Before(end)
	}
	var workers []*worker
	var wg sync.WaitGroup
	res := &phaseResult{okByTID: map[string]int{}}
	if l.rate <= 0 {
		workers = make([]*worker, l.conc)
		for wi := range workers {
			w := &worker{okByTID: map[string]int{}}
			workers[wi] = w
			wg.Go(func() {
				// Paced: each user sends on its own schedule, conc/pace
				// seconds apart, staggered; a late request goes at once.
				var every time.Duration
				at := start
				if l.pace > 0 {
					every = time.Duration(float64(l.conc) / l.pace * float64(time.Second))
					at = start.Add(every * time.Duration(wi) / time.Duration(l.conc))
				}
				for {
					if every > 0 {
						time.Sleep(time.Until(at))
						at = at.Add(every)
					}
					i, ok := next()
					if !ok {
						return
					}
					l.one(w, wi, i)
				}
			})
		}
		wg.Wait()
	} else {
		// Open loop: arrivals on a fixed schedule, each on its own
		// goroutine, latency counted from the scheduled time; arrivals
		// beyond maxInFlight are dropped and counted as errors.
		maxInFlight := int64(max(4*l.conc, 64))
		var inFlight atomic.Int64
		var mu sync.Mutex
		interval := time.Duration(float64(time.Second) / l.rate)
		for k := 0; ; k++ {
			at := start.Add(time.Duration(k) * interval)
			if !at.Before(end) || (limit > 0 && k >= limit) {
				break
			}
			time.Sleep(time.Until(at))
			if inFlight.Load() >= maxInFlight {
				res.dropped++
				res.addErr("open loop: dropped an arrival (max in flight reached)")
				continue
			}
			inFlight.Add(1)
			wg.Go(func() {
				defer inFlight.Add(-1)
				w := &worker{okByTID: map[string]int{}}
				l.one(w, k, k)
				if l.direct == nil && len(w.samples) == 1 {
					w.samples[0].lat = int64(time.Since(at)) // include any wait behind the schedule
				}
				mu.Lock()
				workers = append(workers, w)
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	res.elapsed = time.Since(start)
	for _, w := range workers {
		res.samples = append(res.samples, w.samples...)
		res.pairs = append(res.pairs, w.pairs...)
		res.ttfe = append(res.ttfe, w.ttfe...)
		res.gap = append(res.gap, w.gap...)
		for k, v := range w.okByTID {
			res.okByTID[k] += v
		}
		res.errCount += w.errs
		for _, e := range w.errMsg {
			if len(res.errs) < 5 {
				res.errs = append(res.errs, e)
			}
		}
	}
	return res
}
