// Command chronicle-bench measures chronicle against plain reverse proxies
// on one machine in one run: it builds and starts cmd/mockllm, chronicle
// (embedded store and a private Redis), Go's httputil.ReverseProxy and, when
// installed, nginx; drives each with the same closed- and open-loop load;
// and prints throughput, latency, latency added over direct (paired per
// request), CPU per 1,000 requests, peak RSS, and checks that nothing the
// proxy answered 2xx went unstored. See README.md in this folder.
package main

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// settings are the command-line flags.
type settings struct {
	Duration     time.Duration `json:"duration"`
	Rounds       int           `json:"rounds"`
	Requests     int           `json:"requests"`
	Concurrency  int           `json:"concurrency"`
	Rate         float64       `json:"rate"`
	ThreadLen    int           `json:"thread_len"`
	ThreadLenBig int           `json:"thread_len_long"`
	ScalingRate  float64       `json:"scaling_rate"`
	Chunks       int           `json:"chunks"`
	ChunkDelay   time.Duration `json:"chunk_delay"`
	Streams      int           `json:"streams"`
	SlowDelay    time.Duration `json:"streams_chunk_delay"`
	HOLBytes     int           `json:"hol_bytes"`
	HOLWindow    time.Duration `json:"hol_window"`
	Pin          bool          `json:"pin"`
	Targets      string        `json:"targets"`
	EmbeddedSync string        `json:"embedded_fsync"`
	// Encryption turns store.encryption on in the chronicle targets
	// (a fresh random key-encryption key per run).
	Encryption bool   `json:"encryption"`
	Workloads  string `json:"workloads"`

	json         bool
	keep         bool
	cpuProfile   string
	chronicleBin string
	mockllmBin   string
}

func parseFlags(args []string, stderr io.Writer) (*settings, error) {
	s := &settings{}
	fs := flag.NewFlagSet("chronicle-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&s.Duration, "duration", 2*time.Second, "length of each load phase")
	fs.IntVar(&s.Rounds, "rounds", 1, "split each measured phase into this many rounds, taken in turn across the targets (CPU is the median round's)")
	fs.IntVar(&s.Requests, "requests", 0, "requests per phase instead of --duration (0: use duration)")
	fs.IntVar(&s.Concurrency, "concurrency", 32, "closed loop: virtual users in flight")
	fs.Float64Var(&s.Rate, "rate", 200, "open loop: arrivals per second (0 skips the open-loop workload)")
	fs.IntVar(&s.ThreadLen, "thread-len", 20, "messages in each replace-mode request")
	fs.IntVar(&s.ThreadLenBig, "thread-len-long", 200, "messages in the long replace workload, CPU scaling (0 skips)")
	fs.Float64Var(&s.ScalingRate, "scaling-rate", 1000, "requests per second of the paced replace workloads that compare thread lengths at one load (0 skips)")
	fs.IntVar(&s.Chunks, "chunks", 20, "text deltas per answer (X-Mock-Chunks)")
	fs.DurationVar(&s.ChunkDelay, "chunk-delay", time.Millisecond, "mock delay between stream events in the stream workload")
	fs.IntVar(&s.Streams, "streams", 2000, "concurrent slow streams per target in the streams check (0 skips)")
	fs.DurationVar(&s.SlowDelay, "streams-chunk-delay", 50*time.Millisecond, "mock delay between events of the slow streams")
	fs.IntVar(&s.HOLBytes, "hol-bytes", 10<<20, "size of the big request in the head-of-line check (0 skips)")
	fs.DurationVar(&s.HOLWindow, "hol-window", 4*time.Second, "length of each half of the head-of-line check, split into --rounds taken in turn across the targets (4 s: about 700 small streams, so p99 rests on 7 of them)")
	fs.BoolVar(&s.Pin, "pin", false, "pin each proxy process to its own core with taskset (the mock to core 0)")
	fs.StringVar(&s.EmbeddedSync, "embedded-fsync", "interval", "store.fsync of the embedded chronicle: interval (the default setting) or always (group commit)")
	fs.BoolVar(&s.Encryption, "encryption", false, "chronicle targets store with encryption at rest (store.encryption, a random key per run)")
	fs.StringVar(&s.Targets, "targets", "all", "comma list of direct,go-httputil,nginx,chronicle-pass,chronicle-embedded,chronicle-redis")
	fs.StringVar(&s.Workloads, "workloads", "all", "comma list of chat,stream,chat-open,replace,append,replace-long")
	fs.BoolVar(&s.json, "json", false, "print the results as JSON instead of tables")
	fs.BoolVar(&s.keep, "keep", false, "keep the temp dir (binaries, configs, data)")
	fs.StringVar(&s.cpuProfile, "cpuprofile", "", "write a CPU profile of each chronicle target's measured phase to this directory (<target>-<workload>.prof)")
	fs.StringVar(&s.chronicleBin, "chronicle-bin", "", "chronicle binary (default: go build ./cmd/chronicle)")
	fs.StringVar(&s.mockllmBin, "mockllm-bin", "", "mockllm binary (default: go build ./cmd/mockllm)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if s.Concurrency < 1 || s.Duration <= 0 && s.Requests <= 0 {
		return nil, fmt.Errorf("need --concurrency >= 1 and a positive --duration or --requests")
	}
	if s.Rounds < 1 {
		return nil, fmt.Errorf("--rounds: want at least 1, got %d", s.Rounds)
	}
	if s.EmbeddedSync != "interval" && s.EmbeddedSync != "always" {
		return nil, fmt.Errorf("--embedded-fsync: want interval or always, got %q", s.EmbeddedSync)
	}
	if s.cpuProfile != "" && (s.Requests > 0 || s.Duration/time.Duration(max(s.Rounds, 1)) < time.Second) {
		return nil, fmt.Errorf("--cpuprofile needs rounds of at least 1s (--duration / --rounds; a profile runs for whole seconds)")
	}
	return s, nil
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == goProxyArg {
		os.Exit(runGoProxy(os.Args[2]))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Row is one workload against one target.
type Row struct {
	Workload     string    `json:"workload"`
	Target       string    `json:"target"`
	Requests     int       `json:"requests"`
	Errors       int       `json:"errors"`
	ErrorSamples []string  `json:"error_samples,omitempty"`
	Seconds      float64   `json:"seconds"`
	RPS          float64   `json:"rps"`
	Latency      Dist      `json:"latency"`
	TTFE         *Dist     `json:"ttfe,omitempty"`
	Pairs        int       `json:"pairs"`
	Added        *Dist     `json:"added,omitempty"`
	AddedTTFE    *Dist     `json:"added_ttfe,omitempty"`
	AddedGap     *Dist     `json:"added_gap,omitempty"`
	CPUPer1k     float64   `json:"cpu_s_per_1k"`
	CPURounds    []float64 `json:"cpu_s_per_1k_rounds,omitempty"`
	StoreCPU1k   float64   `json:"store_cpu_s_per_1k,omitempty"`
	PeakRSSKB    int64     `json:"peak_rss_kb"`
	// PairBusy is the share of the whole machine's CPU that was busy
	// during the paired phase: near 1, the added latency is mostly the
	// wait for a core that the client, the mock, the store and the proxy
	// share.
	PairBusy float64 `json:"paired_machine_busy,omitempty"`
}

// Report is everything one run measured.
type Report struct {
	Settings *settings       `json:"settings"`
	CPUs     int             `json:"cpus"`
	Rows     []*Row          `json:"rows"`
	Lost     []*LostCheck    `json:"lost"`
	Streams  []*StreamsCheck `json:"streams"`
	HOL      []*HOLCheck     `json:"head_of_line"`
	Goals    []Goal          `json:"goals"`
	Notes    []string        `json:"notes"`
	Failed   bool            `json:"failed"`
}

// workload is one kind of load.
type workload struct {
	name    string
	sp      *spec
	open    bool    // open loop at --rate
	pace    float64 // closed loop held to this many requests per second
	threads bool    // a stable X-Thread-Id per virtual user
	rotate  int     // > 0: each virtual user moves to a new thread after this many requests
	noPair  bool    // skip the paired (added latency) phase
}

func run(args []string, stdout, stderr io.Writer) int {
	s, err := parseFlags(args, stderr)
	if err != nil {
		return 2
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "chronicle-bench: "+format+"\n", a...) }

	dir, err := os.MkdirTemp("", "chronicle-bench-")
	if err != nil {
		logf("%v", err)
		return 2
	}
	st := &starter{pin: s.Pin, ncpu: runtime.NumCPU(), embeddedFsync: s.EmbeddedSync}
	if s.Encryption {
		kek := make([]byte, 32)
		if _, err := rand.Read(kek); err != nil {
			logf("%v", err)
			return 2
		}
		st.encryptionKey = base64.StdEncoding.EncodeToString(kek)
	}
	if s.Pin {
		if p, err := exec.LookPath("taskset"); err == nil {
			st.taskset = p
		}
	}
	cleanup := func() {
		st.stopAll()
		if !s.keep {
			os.RemoveAll(dir)
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sig
		logf("interrupted; stopping children")
		cleanup()
		os.Exit(130)
	}()
	defer cleanup()

	rep := &Report{Settings: s, CPUs: runtime.NumCPU()}
	if s.Pin && st.taskset == "" {
		rep.Notes = append(rep.Notes, "--pin: taskset not found, nothing pinned")
	}
	targets, err := setup(s, st, dir, rep, logf)
	if err != nil {
		logf("setup: %v", err)
		return 2
	}
	bench(s, targets, rep, logf)

	rep.Failed = failed(rep)
	rep.Goals = evaluateGoals(rep)
	if s.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		printReport(stdout, rep)
	}
	if rep.Failed {
		return 1
	}
	return 0
}

func want(list, name string) bool {
	if list == "all" || list == "" {
		return true
	}
	for _, n := range strings.Split(list, ",") {
		if strings.TrimSpace(n) == name {
			return true
		}
	}
	return false
}

// setup builds the binaries and starts every process; it returns the
// targets in table order, direct first.
func setup(s *settings, st *starter, dir string, rep *Report, logf func(string, ...any)) ([]*target, error) {
	logf("building binaries into %s", dir)
	if err := buildBinaries(dir, &s.chronicleBin, &s.mockllmBin,
		want(s.Targets, "chronicle-pass") || want(s.Targets, "chronicle-embedded") || want(s.Targets, "chronicle-redis")); err != nil {
		return nil, err
	}
	mock, mockURL, err := st.startMock(s.mockllmBin)
	if err != nil {
		return nil, err
	}
	logf("mockllm at %s", mockURL)
	ts := []*target{{Name: "direct", base: mockURL, proc: mock, short: "d"}}
	if want(s.Targets, "go-httputil") {
		c, u, err := st.startGoProxy(mockURL)
		if err != nil {
			return nil, err
		}
		t := &target{Name: "go-httputil", base: u, proc: c, short: "g"}
		t.fresh = func() (*target, error) {
			c, u, err := st.startGoProxy(mockURL)
			if err != nil {
				return nil, err
			}
			f := *t
			f.base, f.proc = u, c
			return &f, nil
		}
		ts = append(ts, t)
	}
	if want(s.Targets, "nginx") {
		if bin, err := exec.LookPath("nginx"); err != nil {
			rep.Notes = append(rep.Notes, "nginx not on PATH: no nginx baseline")
		} else {
			c, u, err := st.startNginx(bin, dir, mockURL)
			if err != nil {
				return nil, err
			}
			ts = append(ts, &target{Name: "nginx", base: u, proc: c, short: "n"})
		}
	}
	// freshChronicle starts another chronicle like t's, on its own data.
	freshChronicle := func(t *target, driver, redisURL, prefix string) func() (*target, error) {
		return func() (*target, error) {
			c, u, err := st.startChronicle(s.chronicleBin, dir, t.short+"-fresh", mockURL, driver, redisURL, false)
			if err != nil {
				return nil, err
			}
			f := *t
			f.base, f.root, f.proc = u+prefix, u, c
			return &f, nil
		}
	}
	if want(s.Targets, "chronicle-pass") || want(s.Targets, "chronicle-embedded") {
		c, u, err := st.startChronicle(s.chronicleBin, dir, "embedded", mockURL, "embedded", "", s.cpuProfile != "")
		if err != nil {
			return nil, err
		}
		logf("chronicle (embedded) at %s", u)
		if want(s.Targets, "chronicle-pass") {
			t := &target{Name: "chronicle-pass", base: u + "/pass", root: u, proc: c, short: "cp"}
			t.fresh = freshChronicle(t, "embedded", "", "/pass")
			ts = append(ts, t)
		}
		if want(s.Targets, "chronicle-embedded") {
			t := &target{Name: "chronicle-embedded", base: u + "/persist", root: u, proc: c, persisted: true, short: "ce"}
			t.fresh = freshChronicle(t, "embedded", "", "/persist")
			ts = append(ts, t)
		}
	}
	if want(s.Targets, "chronicle-redis") {
		r, addr, err := st.startRedis(dir)
		if err != nil {
			rep.Notes = append(rep.Notes, "no chronicle-redis target: "+err.Error())
		} else {
			c, u, err := st.startChronicle(s.chronicleBin, dir, "redis", mockURL, "redis", "redis://"+addr+"/0", s.cpuProfile != "")
			if err != nil {
				return nil, err
			}
			logf("chronicle (redis %s) at %s", addr, u)
			t := &target{Name: "chronicle-redis", base: u + "/persist", root: u, proc: c, aux: r, persisted: true, short: "cr"}
			t.fresh = freshChronicle(t, "redis", "redis://"+addr+"/0", "/persist")
			ts = append(ts, t)
		}
	}
	return ts, nil
}

// workloads builds the request kinds once.
func workloads(s *settings) []*workload {
	const path = "/v1/chat/completions"
	hi := []string{userMsg("Say hello.")}
	var ws []*workload
	add := func(w *workload) {
		if want(s.Workloads, w.name) {
			ws = append(ws, w)
		}
	}
	add(&workload{name: "chat", threads: true, sp: &spec{path: path, body: chatBody(hi, false), headers: mockHeaders(s.Chunks, 0)}})
	add(&workload{name: "stream", threads: true, sp: &spec{path: path, body: chatBody(hi, true), headers: mockHeaders(s.Chunks, s.ChunkDelay), stream: true}})
	if s.Rate > 0 {
		add(&workload{name: "chat-open", open: true, sp: &spec{path: path, body: chatBody(hi, false), headers: mockHeaders(s.Chunks, 0)}})
	}
	if s.ThreadLen > 0 {
		add(&workload{name: "replace", threads: true, sp: &spec{path: path, body: chatBody(history(s.ThreadLen), false), headers: mockHeaders(s.Chunks, 0)}})
	}
	// A thread takes --thread-len/2 turns (user and reply each), so the
	// upstream gets the same --thread-len messages as in replace mode; a
	// thread that grew for the whole phase would measure its length.
	add(&workload{name: "append", threads: true, rotate: max(s.ThreadLen/2, 1), sp: &spec{path: path, body: chatBody(hi, false),
		headers: append(mockHeaders(s.Chunks, 0), [2]string{"X-Thread-Mode", "append"})}})
	if s.ThreadLenBig > 0 {
		add(&workload{name: "replace-long", threads: true, noPair: true, sp: &spec{path: path, body: chatBody(history(s.ThreadLenBig), false), headers: mockHeaders(s.Chunks, 0)}})
	}
	if s.ScalingRate > 0 && s.ThreadLen > 0 && s.ThreadLenBig > 0 {
		// The same two lengths at one request rate, below what either
		// saturates: at full load the longer bodies run slower through the
		// mock, and a proxy's fixed costs per wake-up spread over fewer
		// requests, which is not work that grows with the thread.
		// replace-paced is also paired: the latency a turn adds at one
		// load, apart from the queueing of a closed loop that saturates
		// the machine.
		add(&workload{name: "replace-paced", threads: true, pace: s.ScalingRate,
			sp: &spec{path: path, body: chatBody(history(s.ThreadLen), false), headers: mockHeaders(s.Chunks, 0)}})
		add(&workload{name: "replace-long-paced", threads: true, noPair: true, pace: s.ScalingRate,
			sp: &spec{path: path, body: chatBody(history(s.ThreadLenBig), false), headers: mockHeaders(s.Chunks, 0)}})
	}
	return ws
}

// bench runs every workload against every target, then the checks.
func bench(s *settings, ts []*target, rep *Report, logf func(string, ...any)) {
	runTag := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	conns := 2*s.Concurrency + 16
	clients := make([]*client, len(ts))
	for i, t := range ts {
		clients[i], _ = newClient(t, max(conns, 4*s.Concurrency))
		defer clients[i].close()
	}
	direct := clients[0]
	ws := workloads(s)
	for _, w := range ws {
		if w.sp.stream {
			ref, err := streamRef(direct, w.sp)
			if err != nil {
				rep.Notes = append(rep.Notes, "stream reference: "+err.Error())
			}
			w.sp.ref = ref
		}
	}
	for _, w := range ws {
		cells := make([]*cellRun, len(ts))
		for i, t := range ts {
			cells[i] = newCell(s, w, t, runTag)
		}
		// Rounds go in turn across the targets, so a slow spell of the
		// machine falls on all of them rather than on one.
		for r := range s.Rounds {
			for i, t := range ts {
				if s.Rounds > 1 {
					logf("%-12s %s (round %d of %d)", w.name, t.Name, r+1, s.Rounds)
				} else {
					logf("%-12s %s", w.name, t.Name)
				}
				cells[i].measure(clients[i], r)
			}
		}
		for i, t := range ts {
			row, okByTID := cells[i].finish(clients[i], direct)
			rep.Rows = append(rep.Rows, row)
			if row.Errors > 0 {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s log after %s errors:\n%s", t.Name, w.name, indent(t.proc.lastLines(), 6)))
			}
			if t.persisted && !w.open && len(okByTID) > 0 {
				rep.Lost = append(rep.Lost, countStored(clients[i], t.Name, w.name, okByTID))
			}
		}
	}
	if s.Streams > 0 {
		sp := &spec{path: "/v1/chat/completions", body: chatBody([]string{userMsg("Say hello.")}, true),
			headers: mockHeaders(s.Chunks, s.SlowDelay), stream: true}
		ref, err := streamRef(direct, sp)
		if err != nil {
			rep.Notes = append(rep.Notes, "slow stream reference: "+err.Error())
		}
		sp.ref = ref
		for _, t := range ts {
			logf("streams      %s (%d at once)", t.Name, s.Streams)
			rep.Streams = append(rep.Streams, freshStreamsCheck(t, sp, s.Streams, "b"+runTag+"-"+t.short+"-slow"))
		}
	}
	if s.HOLBytes > 0 {
		small := &spec{path: "/v1/chat/completions", body: chatBody([]string{userMsg("Say hello.")}, true),
			headers: mockHeaders(s.Chunks, time.Millisecond), stream: true}
		small.ref, _ = streamRef(direct, small)
		big := &spec{path: "/v1/chat/completions", body: bigBody(s.HOLBytes), headers: mockHeaders(1, 0)}
		rep.HOL = holChecks(ts, small, big, s.HOLWindow, s.Rounds, func(t *target) string { return "b" + runTag + "-" + t.short + "-hol" }, s.cpuProfile, logf)
	}
}

// cellRun is one workload against one target: measured rounds for
// throughput, latency, CPU and RSS, then (except for direct) a paired phase
// for the latency added over direct.
type cellRun struct {
	s       *settings
	w       *workload
	t       *target
	row     *Row
	tids    func(phase string) func(int) string
	lat     []int64
	ttfe    []int64
	okByTID map[string]int
	cpu     []float64 // per round, s/1k
	aux     []float64
}

func newCell(s *settings, w *workload, t *target, runTag string) *cellRun {
	c := &cellRun{s: s, w: w, t: t, row: &Row{Workload: w.name, Target: t.Name}, okByTID: map[string]int{}}
	turns := map[string][]int{} // per phase, requests each virtual user sent
	c.tids = func(phase string) func(int) string {
		if !w.threads {
			return nil
		}
		ids := make([]string, s.Concurrency)
		for i := range ids {
			ids[i] = fmt.Sprintf("b%s-%s-%s-%s-%d", runTag, t.short, w.name, phase, i)
		}
		if w.rotate <= 0 {
			return func(i int) string { return ids[i] }
		}
		// Kept across the rounds of a phase; each user's count is its own
		// goroutine's.
		if turns[phase] == nil {
			turns[phase] = make([]int, s.Concurrency)
		}
		n := turns[phase]
		return func(i int) string {
			k := n[i] / w.rotate
			n[i]++
			return ids[i] + "-" + strconv.Itoa(k)
		}
	}
	resetPeakRSS(t.proc.pid())
	return c
}

// measure runs round r of the measured phase: --duration (or --requests)
// split into --rounds. Each round's virtual users keep their thread ids.
func (c *cellRun) measure(cl *client, r int) {
	s, w, t := c.s, c.w, c.t
	pid := t.proc.pid()
	cpu0 := cpuSeconds(pid)
	var aux0 float64
	if t.aux != nil {
		aux0 = cpuSeconds(t.aux.pid())
	}
	dur, maxReq := s.Duration/time.Duration(s.Rounds), 0
	if s.Requests > 0 {
		maxReq = max(s.Requests/s.Rounds, 1)
	}
	l := &load{proxied: cl, sp: w.sp, tid: c.tids("solo"), conc: s.Concurrency, dur: dur, maxReq: maxReq, pace: w.pace}
	if w.open {
		l.rate = s.Rate
	}
	var profiled chan error
	if r == 0 && s.cpuProfile != "" && t.root != "" {
		profiled = make(chan error, 1)
		go func() {
			profiled <- cpuProfile(t.root, dur, filepath.Join(s.cpuProfile, t.Name+"-"+w.name+".prof"))
		}()
	}
	solo := l.run()
	cpu := cpuSeconds(pid) - cpu0
	if profiled != nil {
		if err := <-profiled; err != nil {
			fmt.Fprintf(os.Stderr, "chronicle-bench: cpu profile of %s %s: %v\n", t.Name, w.name, err)
		}
	}
	row := c.row
	n := len(solo.samples)
	row.Requests += n
	row.Seconds += solo.elapsed.Seconds()
	if n > 0 {
		c.cpu = append(c.cpu, cpu/float64(n)*1000)
		if t.aux != nil {
			c.aux = append(c.aux, (cpuSeconds(t.aux.pid())-aux0)/float64(n)*1000)
		}
	}
	for _, sm := range solo.samples {
		if sm.ok {
			c.lat = append(c.lat, sm.lat)
			c.ttfe = append(c.ttfe, sm.ttfe)
		}
	}
	c.absorb(solo)
}

// absorb adds a phase's errors and stored-turn counts to the cell's.
func (c *cellRun) absorb(r *phaseResult) {
	c.row.Errors += r.errCount
	for _, e := range r.errs {
		if len(c.row.ErrorSamples) < 5 {
			c.row.ErrorSamples = append(c.row.ErrorSamples, e)
		}
	}
	for k, v := range r.okByTID {
		c.okByTID[k] += v
	}
}

// finish runs the paired phase and completes the row. CPU per 1k is the
// median round's (the only round's with --rounds 1).
func (c *cellRun) finish(cl, direct *client) (*Row, map[string]int) {
	s, w, t, row := c.s, c.w, c.t, c.row
	if row.Seconds > 0 {
		row.RPS = float64(row.Requests) / row.Seconds
	}
	row.CPUPer1k = median(c.cpu)
	if len(c.cpu) > 1 {
		row.CPURounds = c.cpu
	}
	row.StoreCPU1k = median(c.aux)
	row.Latency = summarize(c.lat)
	if w.sp.stream {
		d := summarize(c.ttfe)
		row.TTFE = &d
	}
	if t.Name != "direct" && !w.noPair {
		pl := &load{proxied: cl, direct: direct, sp: w.sp, tid: c.tids("pair"), conc: s.Concurrency, dur: s.Duration, maxReq: s.Requests, pace: w.pace}
		if w.open {
			pl.rate = s.Rate
		}
		b0, t0, ok0 := machineTicks()
		paired := pl.run()
		if b1, t1, ok1 := machineTicks(); ok0 && ok1 {
			row.PairBusy = busyShare(b0, t0, b1, t1)
		}
		row.Pairs = len(paired.pairs)
		row.Added = addedDist(paired.pairs)
		row.AddedTTFE = addedDist(paired.ttfe)
		row.AddedGap = addedDist(paired.gap)
		c.absorb(paired)
	}
	row.PeakRSSKB = statusKB(t.proc.pid(), "VmHWM")
	return row, c.okByTID
}

// median of xs (the mean of the middle two for an even count); 0 when
// empty.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	ys := slices.Clone(xs)
	slices.Sort(ys)
	m := len(ys) / 2
	if len(ys)%2 == 1 {
		return ys[m]
	}
	return (ys[m-1] + ys[m]) / 2
}

// failed reports whether any request failed or any check found a loss.
func failed(r *Report) bool { return len(failures(r)) > 0 }

// failures names what failed: "workload/target" for requests that failed,
// "lost/target/workload" for stored turns that differ from 2xx answers,
// "streams/target" and "hol/target" for the checks.
func failures(r *Report) []string {
	var out []string
	for _, row := range r.Rows {
		if row.Errors > 0 {
			out = append(out, row.Workload+"/"+row.Target)
		}
	}
	for _, l := range r.Lost {
		if l.Failed() {
			out = append(out, "lost/"+l.Target+"/"+l.Workload)
		}
	}
	for _, sc := range r.Streams {
		if sc.Failed > 0 {
			out = append(out, "streams/"+sc.Target)
		}
	}
	for _, h := range r.HOL {
		if h.Errors > 0 {
			out = append(out, "hol/"+h.Target)
		}
	}
	return out
}

// indent prefixes every line of the last n lines of s.
func indent(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	lines = lines[max(0, len(lines)-n):]
	return "    " + strings.Join(lines, "\n    ")
}
