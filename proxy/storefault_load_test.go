package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/chronicle-proxy/chronicle/store/spool"
	"github.com/tidwall/gjson"
)

// faultRun is one fault test run: a redis-server with AOF, chronicle on it
// (with or without the spool), and clients sending turns while the fault
// happens. Each client owns a thread and sends turns in replace mode, the
// next one only after the last one ended; what it was told succeeded is
// checked against the store once it has recovered.
type faultRun struct {
	t       *testing.T
	rd      *redistest.Server
	backend *redisstore.Store
	spool   *spool.Store
	// spoolLog is what the spool logged, for a failure's diagnosis.
	spoolLog *syncBuffer
	p        *testProxy
	clients  []*faultClient
	// failover: the victim is a master that Sentinel replaces; it is
	// killed and not restarted.
	failover bool
	// back is when the store returned; recovery how long after that the
	// store answered with every spooled write applied.
	back     time.Time
	recovery time.Duration
	// fault is closed once the fault was injected; counters taken after.
	mu             sync.Mutex
	faulted        bool
	startedBefore  map[*faultClient]bool
	endedAfter     int // responses ended after the fault
	faultEnded     chan struct{}
	faultEndedOnce sync.Once
}

type faultClient struct {
	id     int
	stream bool
	thread string
	// acked are the user texts of the turns the client was told were
	// whole, in order, and ackedRuns their run ids.
	acked     []string
	ackedRuns []string
	refused   int
}

const faultConfig = `
store: {op_timeout: 1s}
leases: {ttl: 3s}
connections:
  - {name: m, provider: openai, base_url: "${MOCK}", on_store_error: %s}
`

// TestStoreFaultsLoseNothing: Redis killed and restarted (AOF everysec and
// always) and paused, under concurrent streamed and non-stream turns,
// each five times. With the spool, every turn a client was told was whole
// is stored after recovery, exactly once, and no run stays running.
// Without the spool, no client is told a turn was whole that is not.
func TestStoreFaultsLoseNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("fault runs take a while")
	}
	type faultKind struct {
		name   string
		aof    string
		pause  bool
		spool  bool
		policy string
	}
	kinds := []faultKind{
		{"kill everysec spool fail", "everysec", false, true, "fail"},
		{"kill always spool pass", "always", false, true, "pass"},
		{"pause everysec spool fail", "everysec", true, true, "fail"},
		{"kill everysec no spool fail", "everysec", false, false, "fail"},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			var acked, stored, spooled, replayed, refused int
			var recovery time.Duration
			for rep := 0; rep < 5; rep++ {
				f := startFaultRun(t, k.aof, k.spool, k.policy)
				f.drive(k.pause)
				a, s := f.check()
				acked += a
				stored += s
				refused += f.refusedTurns()
				recovery = max(recovery, f.recovery)
				if f.spool != nil {
					st := f.spool.Stats()
					spooled += int(st.Spooled)
					replayed += int(st.Replayed)
				}
			}
			t.Logf("%s: %d turns acknowledged, %d of them stored; %d refused (told); %d writes spooled, %d replayed; recovery at most %v",
				k.name, acked, stored, refused, spooled, replayed, recovery.Round(time.Millisecond))
			if k.spool && spooled == 0 {
				t.Fatal("no write was spooled in five faults: the test did not exercise the spool")
			}
		})
	}
}

// TestClusterNodeRestartLosesNothing: one master of a 3-master Cluster
// (AOF on) SIGKILLed and restarted under concurrent turns, five times:
// the threads on its slots spool and replay like a single Redis's.
func TestClusterNodeRestartLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("fault runs take a while")
	}
	var acked, stored, spooled int
	for rep := 0; rep < 5; rep++ {
		c := redistest.StartCluster(t, 3, "--appendonly", "yes", "--appendfsync", "everysec")
		f := startFaultRunOn(t, "redis+cluster://"+strings.Join(c.Addrs(), ","), c.Nodes[rep%3], true, false, "fail")
		f.drive(false)
		a, s := f.check()
		acked += a
		stored += s
		spooled += int(f.spool.Stats().Spooled)
	}
	t.Logf("cluster node restart: %d turns acknowledged, %d of them stored; %d writes spooled", acked, stored, spooled)
	if spooled == 0 {
		t.Fatal("no write was spooled in five node restarts: the test did not exercise the spool")
	}
}

// TestSentinelFailoverLosesNothing: the master of a Sentinel setup (one
// replica, three sentinels) SIGKILLed under concurrent turns, and never
// restarted: Sentinel promotes the replica, and every turn a client was
// told was whole is on the new master, five times.
func TestSentinelFailoverLosesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("fault runs take a while")
	}
	var acked, stored, spooled int
	var recovery time.Duration
	for rep := 0; rep < 5; rep++ {
		sen := redistest.StartSentinel(t, "--appendonly", "yes", "--appendfsync", "everysec")
		f := startFaultRunOn(t, sen.URL(), sen.Master, true, false, "fail")
		f.failover = true
		f.drive(false)
		a, s := f.check()
		acked += a
		stored += s
		spooled += int(f.spool.Stats().Spooled)
		recovery = max(recovery, f.recovery)
	}
	t.Logf("sentinel failover: %d turns acknowledged, %d of them stored; %d writes spooled; failover and replay took at most %v",
		acked, stored, spooled, recovery.Round(time.Millisecond))
}

func startFaultRun(t *testing.T, aof string, withSpool bool, policy string) *faultRun {
	t.Helper()
	rd := redistest.Start(t, "--appendonly", "yes", "--appendfsync", aof)
	return startFaultRunOn(t, rd.URL(), rd, withSpool, aof == "always", policy)
}

// startFaultRunOn is a fault run on the store at url, whose node victim
// the fault strikes.
func startFaultRunOn(t *testing.T, url string, victim *redistest.Server, withSpool, fsync bool, policy string) *faultRun {
	t.Helper()
	f := &faultRun{t: t, startedBefore: map[*faultClient]bool{}, faultEnded: make(chan struct{}), rd: victim}
	var err error
	// Short client timeouts: a paused Redis accepts connections and
	// answers nothing, and go-redis's defaults (5s to dial, 3s to read,
	// 4s for a pooled connection) would stretch every fault.
	f.backend, err = redisstore.Open(context.Background(), redisstore.Options{URL: url,
		DialTimeout: 300 * time.Millisecond, ReadTimeout: 700 * time.Millisecond, WriteTimeout: 700 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var st store.Store = f.backend
	if withSpool {
		f.spoolLog = &syncBuffer{}
		f.spool, err = spool.Open(f.backend, spool.Options{Dir: t.TempDir(), Fsync: fsync,
			Logger:   slog.New(slog.NewTextHandler(f.spoolLog, &slog.HandlerOptions{Level: slog.LevelDebug})),
			RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, OpTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		st = f.spool
	}
	t.Cleanup(func() { st.Close() })
	m := startMock(t)
	f.p = startProxyWith(t, m, fmt.Sprintf(faultConfig, policy), st)
	return f
}

// drive runs ten clients, six turns each; the fault comes once 15 turns
// were acknowledged, and ends once every turn in flight at the fault has
// ended and 20 more responses came back.
func (f *faultRun) drive(pause bool) {
	clients := make([]*faultClient, 10)
	var wg sync.WaitGroup
	var ackedTotal atomic.Int64
	hit := make(chan struct{})
	var hitOnce sync.Once
	for i := range clients {
		c := &faultClient{id: i, stream: i%2 == 0, thread: fmt.Sprintf("fault-%d", i)}
		clients[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			for turn := 0; turn < 6; {
				ok := f.turn(c, turn)
				if ok {
					turn++
					if ackedTotal.Add(1) == 15 {
						hitOnce.Do(func() { close(hit) })
					}
				}
			}
		}()
	}
	<-hit
	f.mu.Lock()
	f.faulted = true
	if pause {
		f.rd.Pause(f.t)
	} else {
		f.rd.Kill()
	}
	f.checkFaultEndedLocked()
	f.mu.Unlock()
	<-f.faultEnded
	switch {
	case f.failover:
		// The sentinels promote the replica on their own; the old master
		// stays dead.
	case pause:
		f.rd.Resume(f.t)
	default:
		f.rd.Restart(f.t)
	}
	f.back = time.Now()
	wg.Wait()
	f.clients = clients
}

func (f *faultRun) checkFaultEndedLocked() {
	if f.faulted && len(f.startedBefore) == 0 && f.endedAfter >= 20 {
		f.faultEndedOnce.Do(func() { close(f.faultEnded) })
	}
}

// turn sends one turn; it reports whether the client was told the turn
// is whole (and records it so).
func (f *faultRun) turn(c *faultClient, turn int) bool {
	var msgs []string
	for _, u := range c.acked {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":%q},{"role":"assistant","content":"noted"}`, u))
	}
	text := fmt.Sprintf("c%d-t%d", c.id, turn)
	msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":%q}`, text))
	body := fmt.Sprintf(`{"model":"gpt-4o","stream":%v,"messages":[%s]}`, c.stream, strings.Join(msgs, ","))
	f.mu.Lock()
	before := !f.faulted
	if before {
		f.startedBefore[c] = true
	}
	f.mu.Unlock()
	headers := []string{"Authorization", "Bearer k", "X-Thread-Id", c.thread, "X-Mock-Scenario", "synthetic"}
	if c.stream {
		headers = append(headers, "X-Mock-Chunks", "10", "X-Mock-Chunk-Delay", "3ms")
	} else {
		headers = append(headers, "X-Mock-First-Byte-Delay", "20ms")
	}
	req, _ := http.NewRequest("POST", f.p.URL+"/m/v1/chat/completions", strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	ok, runID := false, ""
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		b, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		runID = resp.Header.Get("X-Run-Id")
		switch {
		case rerr != nil || resp.StatusCode != 200:
		case resp.Header.Get("X-Persisted") == "false":
			// Forwarded without persistence (on_store_error: pass): the
			// client was told.
		case c.stream:
			ok = bytes.Contains(b, []byte("data: [DONE]")) && !bytes.Contains(b, []byte(`"error"`))
		default:
			ok = resp.Header.Get("X-Persisted") != "false" && gjson.GetBytes(b, "choices.0.message").Exists()
		}
		if !ok && resp.StatusCode != 503 && resp.StatusCode != 409 && resp.Header.Get("X-Persisted") != "false" && !bytes.Contains(b, []byte("store_unavailable")) {
			f.t.Errorf("client %d turn %d: an answer that is neither whole nor a store error: %d %s", c.id, turn, resp.StatusCode, b)
		}
	}
	f.mu.Lock()
	if before {
		delete(f.startedBefore, c)
	} else if f.faulted {
		f.endedAfter++
	}
	f.checkFaultEndedLocked()
	f.mu.Unlock()
	if ok {
		c.acked = append(c.acked, text)
		c.ackedRuns = append(c.ackedRuns, runID)
	} else {
		c.refused++
		time.Sleep(5 * time.Millisecond) // a client's backoff before it tries again, not a synchronisation
	}
	return ok
}

// logsOf is what the proxy and the spool logged of run id, for a
// failure's diagnosis.
func (f *faultRun) logsOf(id string) string {
	var out []string
	logs := [][]byte{[]byte(f.p.log.String())}
	if f.spoolLog != nil {
		logs = append(logs, []byte(f.spoolLog.String()))
	}
	for _, l := range logs {
		for _, line := range bytes.Split(l, []byte("\n")) {
			if bytes.Contains(line, []byte(id)) {
				out = append(out, string(line))
			}
		}
	}
	return strings.Join(out, "\n")
}

func (f *faultRun) refusedTurns() int {
	n := 0
	for _, c := range f.clients {
		n += c.refused
	}
	return n
}

// check waits for the spool to drain, then compares what each client was
// told with what the store holds: every acknowledged run completed, each
// thread exactly the acknowledged turns (no half turn, no duplicate), and,
// with the spool, no run left running. It returns the acknowledged and
// stored counts.
func (f *faultRun) check() (acked, stored int) {
	t := f.t
	ctx := context.Background()
	// The store is back once it answers (go-redis answers its last dial
	// error for up to a second after a restart); then the spool drains.
	deadline := time.Now().Add(30 * time.Second)
	for f.backend.Ping(ctx) != nil || f.spool != nil && f.spool.Flush(ctx) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the store did not come back, or the spool did not drain: %v", f.backend.Ping(ctx))
		}
		time.Sleep(20 * time.Millisecond) // polling for recovery, not a synchronisation
	}
	f.recovery = time.Since(f.back)
	for _, c := range f.clients {
		k := store.Key{Tenant: passThroughTenant([]byte("k")), Thread: c.thread}
		runs, err := f.backend.ListRuns(ctx, k)
		if err != nil {
			t.Fatalf("client %d: runs: %v", c.id, err)
		}
		status := map[string]store.Run{}
		for _, r := range runs {
			status[r.ID] = r
			if f.spool != nil && r.Status == store.Running {
				t.Errorf("client %d: run %s left running", c.id, r.ID)
			}
		}
		for i, id := range c.ackedRuns {
			acked++
			if r := status[id]; r.Status == store.Completed {
				stored++
			} else {
				t.Errorf("client %d turn %d: acknowledged, but its run %s is %q %q (run %+v)\n%s", c.id, i, id, r.Status, r.Reason, r, f.logsOf(id))
			}
		}
		th, err := f.backend.LoadThread(ctx, k)
		if err != nil {
			t.Fatalf("client %d: thread: %v", c.id, err)
		}
		var users []string
		for i, m := range th.Messages {
			role := gjson.GetBytes(m, "role").String()
			if want := []string{"user", "assistant"}[i%2]; role != want {
				t.Errorf("client %d: message %d is %s, want %s", c.id, i, role, want)
			}
			if role == "user" {
				users = append(users, gjson.GetBytes(m, "content").String())
			}
		}
		if got, want := strings.Join(users, " "), strings.Join(c.acked, " "); got != want || len(th.Messages) != 2*len(c.acked) {
			t.Errorf("client %d: stored turns %q (%d messages), acknowledged %q", c.id, got, len(th.Messages), want)
		}
	}
	return acked, stored
}
