package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// LostCheck compares the turns chronicle stored with the 2xx answers the
// bench received, for one persisted phase.
type LostCheck struct {
	Target   string `json:"target"`
	Workload string `json:"workload"`
	Threads  int    `json:"threads"`
	OK2xx    int    `json:"ok_2xx"`
	Stored   int    `json:"stored_completed"`
	// Unverified says why the stored count could not be read (the thread
	// API missing); such a check neither passes nor fails the run.
	Unverified string   `json:"unverified,omitempty"`
	Mismatches []string `json:"mismatches,omitempty"`
}

// Failed reports a difference between stored and answered turns.
func (l *LostCheck) Failed() bool { return l.Unverified == "" && l.OK2xx != l.Stored }

// countStored reads GET /api/threads/{id} for every thread the phase used
// and counts its completed runs. Runs finish just after the last byte is
// relayed, so it retries for a few seconds until the counts agree.
func countStored(c *client, target, workload string, okByTID map[string]int) *LostCheck {
	lc := &LostCheck{Target: target, Workload: workload, Threads: len(okByTID)}
	for _, n := range okByTID {
		lc.OK2xx += n
	}
	tids := make([]string, 0, len(okByTID))
	for t := range okByTID {
		tids = append(tids, t)
	}
	sort.Strings(tids)
	deadline := time.Now().Add(5 * time.Second)
	for {
		stored, mism, unverified := countOnce(c, tids, okByTID)
		lc.Stored, lc.Mismatches, lc.Unverified = stored, mism, unverified
		if unverified != "" || len(mism) == 0 || time.Now().After(deadline) {
			return lc
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func countOnce(c *client, tids []string, want map[string]int) (stored int, mism []string, unverified string) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	for _, tid := range tids {
		req.Reset()
		req.SetRequestURI("http://" + c.host + "/api/threads/" + tid)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		if err := c.plain.DoTimeout(req, resp, 10*time.Second); err != nil {
			mism = append(mism, fmt.Sprintf("%s: %v", tid, err))
			continue
		}
		body := resp.Body()
		if resp.StatusCode() == 404 && gjson.GetBytes(body, "error.code").String() == "unknown_connection" {
			// "api" was taken for a connection name: the route is missing.
			return 0, nil, "GET /api/threads/{id} answers 404 unknown_connection: this chronicle build has no thread API yet"
		}
		if resp.StatusCode() != 200 {
			mism = append(mism, fmt.Sprintf("%s: status %d (%s), %d answered 2xx", tid, resp.StatusCode(), clip(body), want[tid]))
			continue
		}
		n := 0
		gjson.GetBytes(body, "runs").ForEach(func(_, r gjson.Result) bool {
			if r.Get("status").String() == "completed" {
				n++
			}
			return true
		})
		stored += n
		if n != want[tid] {
			mism = append(mism, fmt.Sprintf("%s: stored %d completed runs, %d answered 2xx", tid, n, want[tid]))
		}
	}
	return stored, mism, ""
}

// StreamsCheck is the many-slow-streams check for one target.
type StreamsCheck struct {
	Target      string  `json:"target"`
	Streams     int     `json:"streams"`
	OK          int     `json:"ok"`
	Failed      int     `json:"failed"`
	FirstEvents int     `json:"reached_first_event"`
	Seconds     float64 `json:"seconds"`
	BaseRSSKB   int64   `json:"base_rss_kb"`
	PeakRSSKB   int64   `json:"peak_rss_kb"`
	KBPerStream float64 `json:"kb_per_stream"`
	// The same for anonymous memory alone (RssAnon: heap, stacks), which
	// leaves out file pages mapped in (the embedded store's bbolt file
	// was read through mmap, before pebble, whose block cache is
	// anonymous memory).
	BaseAnonKB      int64   `json:"base_rss_anon_kb"`
	PeakAnonKB      int64   `json:"peak_rss_anon_kb"`
	AnonKBPerStream float64 `json:"anon_kb_per_stream"`
	FreshProcess    bool    `json:"fresh_process"` // measured on a process started for the check
	// When the anonymous peak came, in seconds from the first stream's
	// start, and when every stream had its first event: a peak at the
	// opening burst and one as the streams end have different causes.
	PeakAnonAt   float64  `json:"peak_anon_at_s"`
	AllOpenAt    float64  `json:"all_open_at_s"`
	ErrorSamples []string `json:"error_samples,omitempty"`
}

// freshStreamsCheck runs the streams check on a new process like t's where
// t has one (every proxy target): a process that ran the load phases keeps
// heap it no longer uses, which its next streams then reuse without RSS
// growing, so its baseline would hide part of what they cost (in session
// 8's runs Redis's base RSS was 59 MB after one load and 132–138 MB after
// another, and its figure 67.9 against 34.7–45.7 KiB per stream).
func freshStreamsCheck(t *target, sp *spec, n int, tidPrefix string) *StreamsCheck {
	if t.fresh == nil {
		return streamsCheck(t, sp, n, tidPrefix)
	}
	f, err := t.fresh()
	if err != nil {
		return &StreamsCheck{Target: t.Name, Streams: n, Failed: n, ErrorSamples: []string{"fresh process: " + err.Error()}}
	}
	defer f.proc.stop()
	sc := streamsCheck(f, sp, n, tidPrefix)
	sc.FreshProcess = true
	return sc
}

// streamsCheck opens n slow streams at once, verifies each arrives complete
// and in the direct stream's order, and samples the proxy's RSS meanwhile.
func streamsCheck(t *target, sp *spec, n int, tidPrefix string) *StreamsCheck {
	sc := &StreamsCheck{Target: t.Name, Streams: n}
	c, err := newClient(t, n+16)
	if err != nil {
		sc.Failed = n
		sc.ErrorSamples = []string{err.Error()}
		return sc
	}
	defer c.close()
	pid := t.proc.pid()
	sc.BaseRSSKB = statusKB(pid, "VmRSS")
	sc.BaseAnonKB = statusKB(pid, "RssAnon")
	var peak, peakAnon, peakAnonAt atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	start := time.Now()
	sampler.Go(func() {
		tk := time.NewTicker(25 * time.Millisecond)
		defer tk.Stop()
		for {
			if v := statusKB(pid, "VmRSS"); v > peak.Load() {
				peak.Store(v)
			}
			if v := statusKB(pid, "RssAnon"); v > peakAnon.Load() {
				peakAnon.Store(v)
				peakAnonAt.Store(int64(time.Since(start)))
			}
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	})
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			tid := ""
			if t.persisted {
				tid = fmt.Sprintf("%s-%d", tidPrefix, i)
			}
			s := c.do(sp, tid, false)
			mu.Lock()
			defer mu.Unlock()
			if s.events > 0 {
				sc.FirstEvents++
			}
			if s.ok {
				sc.OK++
			} else {
				sc.Failed++
				if len(sc.ErrorSamples) < 3 {
					sc.ErrorSamples = append(sc.ErrorSamples, s.err)
				}
			}
		})
	}
	wg.Wait()
	sc.Seconds = time.Since(start).Seconds()
	close(stop)
	sampler.Wait()
	sc.PeakRSSKB, sc.PeakAnonKB = peak.Load(), peakAnon.Load()
	sc.PeakAnonAt = time.Duration(peakAnonAt.Load()).Seconds()
	if sc.FirstEvents > 0 {
		// Per stream that was really open (reached its first event).
		sc.KBPerStream = float64(sc.PeakRSSKB-sc.BaseRSSKB) / float64(sc.FirstEvents)
		sc.AnonKBPerStream = float64(sc.PeakAnonKB-sc.BaseAnonKB) / float64(sc.FirstEvents)
	}
	return sc
}

// HOLCheck is the head-of-line check for one target: small streams on
// their own connections, alone and then beside a large request.
type HOLCheck struct {
	Target      string   `json:"target"`
	BigBytes    int      `json:"big_bytes"`
	BigSent     int      `json:"big_sent"`
	BigOK       int      `json:"big_ok"`
	BigP50      int64    `json:"big_p50_ns"`
	AloneGapP99 int64    `json:"alone_gap_p99_ns"`
	WithGapP99  int64    `json:"with_big_gap_p99_ns"`
	AloneTTFE99 int64    `json:"alone_ttfe_p99_ns"`
	WithTTFE99  int64    `json:"with_big_ttfe_p99_ns"`
	Streams     int      `json:"small_streams"`
	Errors      int      `json:"errors"`
	ErrSamples  []string `json:"error_samples,omitempty"`
}

// holSamples is what the rounds of one target's head-of-line check
// gathered.
type holSamples struct {
	aloneGaps, aloneTTFEs, withGaps, withTTFEs, bigLat []int64
}

// holChecks runs the head-of-line check on every target in rounds taken
// in turn across the targets, as the load phases do, so that a slow spell
// of the VM falls on all of them rather than on one (direct's own figures,
// which every target is compared with, moved by tens of milliseconds from
// one minute to the next). Each round gives every target window/rounds
// alone and as long beside the big requests; a target's p99s are over all
// its rounds' samples. With profDir set the first round saves an
// execution trace and a CPU profile of each chronicle target's second half
// (<target>-hol.trace, <target>-hol.prof): the trace shows who held the P
// while a small stream waited.
func holChecks(ts []*target, small, big *spec, window time.Duration, rounds int, tag func(*target) string, profDir string, logf func(string, ...any)) []*HOLCheck {
	rounds = max(rounds, 1)
	hs := make([]*HOLCheck, len(ts))
	acc := make([]holSamples, len(ts))
	for i, t := range ts {
		hs[i] = &HOLCheck{Target: t.Name, BigBytes: len(big.body)}
	}
	for r := range rounds {
		for i, t := range ts {
			logf("head-of-line %s (round %d of %d)", t.Name, r+1, rounds)
			prof := ""
			if r == 0 {
				prof = profDir
			}
			holRound(t, small, big, window/time.Duration(rounds), fmt.Sprintf("%s-r%d", tag(t), r), prof, hs[i], &acc[i])
		}
	}
	for i, h := range hs {
		a := &acc[i]
		h.AloneGapP99, h.AloneTTFE99 = summarize(a.aloneGaps).P99, summarize(a.aloneTTFEs).P99
		h.WithGapP99, h.WithTTFE99 = summarize(a.withGaps).P99, summarize(a.withTTFEs).P99
		h.BigP50 = summarize(a.bigLat).P50
	}
	return hs
}

// holRound runs small streams for window alone, then again while one
// connection sends big requests back to back, adding to h's counts and
// acc's samples.
func holRound(t *target, small, big *spec, window time.Duration, tidPrefix, profDir string, h *HOLCheck, acc *holSamples) {
	c, err := newClient(t, 64)
	if err != nil {
		h.Errors++
		h.ErrSamples = append(h.ErrSamples, err.Error())
		return
	}
	defer c.close()
	bigc, _ := newClient(t, 1)
	defer bigc.close()
	run := func(phase string, gaps, ttfes *[]int64) {
		l := &load{proxied: c, sp: small, conc: 4, dur: window, keepGaps: true}
		if t.persisted {
			l.tid = func(w int) string { return fmt.Sprintf("%s-%s-%d", tidPrefix, phase, w) }
		}
		r := l.run()
		for _, s := range r.samples {
			if s.ok {
				*gaps = append(*gaps, s.gaps...)
				*ttfes = append(*ttfes, s.ttfe)
			}
		}
		h.Streams += len(r.samples)
		h.Errors += r.errCount
		for _, e := range r.errs {
			if len(h.ErrSamples) < 3 {
				h.ErrSamples = append(h.ErrSamples, e)
			}
		}
	}
	run("alone", &acc.aloneGaps, &acc.aloneTTFEs)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 50 {
			select {
			case <-stop:
				return
			default:
			}
			s := bigc.do(big, "", false)
			h.BigSent++
			if s.ok {
				h.BigOK++
				acc.bigLat = append(acc.bigLat, s.lat)
			} else {
				h.Errors++
				if len(h.ErrSamples) < 3 {
					h.ErrSamples = append(h.ErrSamples, "big: "+s.err)
				}
			}
		}
	})
	var profiled sync.WaitGroup
	if profDir != "" && t.root != "" && window >= time.Second { // profiles take whole seconds
		for _, p := range []struct {
			ext   string
			fetch func(string, time.Duration, string) error
		}{{".trace", execTrace}, {".prof", cpuProfile}} {
			profiled.Go(func() {
				if err := p.fetch(t.root, window, filepath.Join(profDir, t.Name+"-hol"+p.ext)); err != nil {
					fmt.Fprintf(os.Stderr, "chronicle-bench: %s of %s head-of-line: %v\n", p.ext, t.Name, err)
				}
			})
		}
	}
	run("with", &acc.withGaps, &acc.withTTFEs)
	close(stop)
	wg.Wait()
	profiled.Wait()
}

// bigBody is a non-stream request whose one user message makes it size bytes.
func bigBody(size int) []byte {
	pad := max(size-64, 1)
	text := strings.Repeat("x", pad)
	return chatBody([]string{userMsg(text)}, false)
}
