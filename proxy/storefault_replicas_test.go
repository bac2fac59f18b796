package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/chronicle-proxy/chronicle/store/spool"
)

// cuttableLink is a TCP forwarder to a Redis server that a test can cut:
// Cut closes every connection through it and refuses new ones (each is
// closed as soon as it is accepted), as a network partition between one
// replica and Redis would; Restore lets connections through again.
type cuttableLink struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	cut    bool
}

func newCuttableLink(t *testing.T, target string) *cuttableLink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &cuttableLink{ln: ln, target: target}
	go l.serve()
	t.Cleanup(func() { ln.Close(); l.Cut() })
	return l
}

func (l *cuttableLink) URL() string { return "redis://" + l.ln.Addr().String() + "/0" }

func (l *cuttableLink) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.cut {
			l.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", l.target)
		if err != nil {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.conns = append(l.conns, c, up)
		l.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); up.Close() }()
		go func() { _, _ = io.Copy(c, up); c.Close() }()
	}
}

func (l *cuttableLink) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

func (l *cuttableLink) Restore() {
	l.mu.Lock()
	l.cut = false
	l.mu.Unlock()
}

// TestTwoReplicasOneSpooling: two replicas share one Redis; replica A
// loses its link to Redis while a stream is in flight, spools the finish
// and acknowledges the turn. Replica B's sweeper marks the run lost.
// When A's link is back, its replay revives the run with the whole turn,
// unless a newer run took the thread on B meanwhile: then the fencing
// token refuses the replay, B's history stays, and the conflict is
// counted.
func TestTwoReplicasOneSpooling(t *testing.T) {
	for i := 0; i < 10; i++ {
		// Five times each.
		newerRunOnB := i%2 == 1
		name := fmt.Sprintf("revived %d", i/2)
		if newerRunOnB {
			name = fmt.Sprintf("fenced by a newer run %d", i/2)
		}
		t.Run(name, func(t *testing.T) {
			rd := redistest.Start(t, "--appendonly", "yes")
			link := newCuttableLink(t, rd.Addr)
			ctx := context.Background()
			openVia := func(url string) *redisstore.Store {
				st, err := redisstore.Open(ctx, redisstore.Options{URL: url,
					DialTimeout: 300 * time.Millisecond, ReadTimeout: 700 * time.Millisecond, WriteTimeout: 700 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				return st
			}
			backendA, backendB := openVia(link.URL()), openVia(rd.URL())
			spoolA, err := spool.Open(backendA, spool.Options{Dir: t.TempDir(), Fsync: true, RetryMin: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			spoolB, err := spool.Open(backendB, spool.Options{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { spoolA.Close(); spoolB.Close() })
			m := startMock(t)
			cfg := `
store: {op_timeout: 1s}
leases: {ttl: 1500ms}
connections:
  - {name: m, provider: openai, base_url: "${MOCK}"}
`
			pA := startProxyWith(t, m, cfg, spoolA)
			pB := startProxyWith(t, m, cfg, spoolB)
			k := store.Key{Tenant: passThroughTenant([]byte("k")), Thread: "t-two"}

			resp := send(t, "POST", pA.URL+"/m/v1/chat/completions", streamBody, "Authorization", "Bearer k",
				"X-Thread-Id", k.Thread, "X-Mock-Gate", "two")
			runID := resp.Header.Get("X-Run-Id")
			br := bufio.NewReader(resp.Body)
			readEvent(t, br)
			link.Cut()
			m.Release("two")
			rest, err := io.ReadAll(br)
			resp.Body.Close()
			if err != nil || !strings.Contains(string(rest), "data: [DONE]") || strings.Contains(string(rest), `"error"`) {
				t.Fatalf("the stream on A, its store cut off: %v\n%s", err, rest)
			}
			if st := spoolA.Stats(); st.Entries == 0 {
				t.Fatalf("A acknowledged a turn it did not spool: %+v", st)
			}
			waitFor(t, "B's sweeper to mark A's run lost", func() bool {
				r, err := backendB.GetRun(ctx, k, runID)
				return err == nil && r.Status == store.Failed && r.Reason == store.ReasonProxyLost
			})
			var bThread []byte
			if newerRunOnB {
				r, body := do(t, "POST", pB.URL+"/m/v1/chat/completions",
					`{"model":"gpt-4o","messages":[{"role":"user","content":"a newer turn, on B"}]}`,
					"Authorization", "Bearer k", "X-Thread-Id", k.Thread)
				if r.StatusCode != 200 {
					t.Fatalf("a newer turn on B: %d %s", r.StatusCode, body)
				}
				th, err := backendB.LoadThread(ctx, k)
				if err != nil {
					t.Fatal(err)
				}
				bThread = joinArray(th.Messages)
			}
			link.Restore()
			waitFor(t, "A's replay", func() bool { return spoolA.Stats().Entries == 0 })
			run, err := backendB.GetRun(ctx, k, runID)
			if err != nil {
				t.Fatal(err)
			}
			th, err := backendB.LoadThread(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			st := spoolA.Stats()
			if newerRunOnB {
				_, metrics := do(t, "GET", pA.URL+"/metrics", "")
				if !strings.Contains(string(metrics), "chronicle_turns_acknowledged_not_stored_total 1") {
					t.Errorf("the fenced turn is not counted as acknowledged and kept nowhere:\n%s", grepLines(string(metrics), "chronicle_turns_"))
				}
				if run.Status != store.Failed || st.Conflicts == 0 || string(joinArray(th.Messages)) != string(bThread) {
					t.Fatalf("fenced replay: run %s %s, stats %+v, thread changed: %v", run.Status, run.Reason, st, string(joinArray(th.Messages)) != string(bThread))
				}
				return
			}
			if run.Status != store.Completed || st.Conflicts != 0 || len(th.Messages) != 2 {
				t.Fatalf("revived: run %s %q, stats %+v, %d messages", run.Status, run.Reason, st, len(th.Messages))
			}
		})
	}
}
