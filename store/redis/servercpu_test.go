package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

// serverStats reads a server's CPU seconds and its command calls (the
// commands scripts run count, the scripts themselves and INFO do not).
func serverStats(b *testing.B, cl *redis.Client) (cpu float64, calls int64) {
	b.Helper()
	info, err := cl.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case k == "used_cpu_user" || k == "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		case strings.HasPrefix(k, "cmdstat_") && k != "cmdstat_evalsha" && k != "cmdstat_info":
			f, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
			n, _ := strconv.ParseInt(f, 10, 64)
			calls += n
		}
	}
	return cpu, calls
}

// benchOwner is a lease owner as long as the proxy's replica ids, so that
// a run's packed start record (which holds it) is as long as in
// production, where it makes the run hash a hash table.
const benchOwner = "replica_2b3orbal7lzn5mnyfzzq"

// BenchmarkServerCPU measures what a persisted turn costs the Redis
// server, the store shared by every replica: 32 callers each run turns on
// a 21-message thread of their own (Chat201: 201) as the proxy does in
// replace mode, and the server's CPU and the commands its scripts ran are
// reported per turn. Chat: start with the thread (known digest), finish
// with the same transcript, usage and the response. Stream: start, the pending turn's
// save, 20 event batches of one event each (a stream whose events come a
// batch window apart), finish. StreamTail: a stream shorter than the
// batch window (the proxy's 50 ms), whose 20 events all go with the
// finish: start, the pending turn's save, finish.
func BenchmarkServerCPU(b *testing.B) {
	resp := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("x", 200) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}}`)
	event := []byte(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}` + "\n\n")
	sess := "sess"
	for _, tc := range []struct {
		name   string
		length int
		stream bool
		tail   bool
	}{{"Chat", 21, false, false}, {"Chat201", 201, false, false}, {"Stream", 21, true, false}, {"StreamTail", 21, true, true}} {
		msgs, hashes := storetest.Msgs(0, tc.length)
		digest := store.Digest(hashes)
		stream, tail, n := tc.stream, tc.tail, tc.length
		if tc.name == "Chat" {
			b.Run("Growing", func(b *testing.B) { benchGrowingTurns(b, resp, sess) })
		}
		b.Run(tc.name, func(b *testing.B) {
			srv := redistest.Start(b)
			cl := srv.Client(b)
			ctx := context.Background()
			s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			turn := func(k store.Key, run string) error {
				st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: run, TTL: 30 * time.Second, Fingerprint: "fp", Model: "m", Owner: benchOwner,
					LoadThread: true, KnownDigest: digest, NoSystem: true})
				if err != nil {
					return err
				}
				stored := st.Thread.Hashes
				if st.Unchanged {
					stored = hashes
				}
				f := store.Finish{Status: store.Completed, Model: "m", SessionID: &sess, Usage: &store.Usage{InputTokens: 10, OutputTokens: 20}}
				if stream {
					if err := s.SaveTranscript(ctx, st.Lease, store.Diff(stored, msgs[:n-1], hashes[:n-1])); err != nil {
						return err
					}
					for i := range 20 {
						if tail {
							f.Events = append(f.Events, event)
							continue
						}
						if err := s.AppendEvents(ctx, st.Lease, int64(i+1), [][]byte{event}); err != nil {
							return err
						}
					}
					if tail {
						f.EventsFrom = 1
					}
					stored = hashes[:n-1]
				} else {
					f.Response = resp
				}
				tr := store.Diff(stored, msgs, hashes)
				f.Transcript = &tr
				return s.Finish(ctx, st.Lease, &f)
			}
			runTurns(b, cl, turn)
		})
	}
}

// benchGrowingTurns is BenchmarkServerCPU's replace turn on a thread
// that grows as a conversation does: each turn starts with the digest of
// what the caller last wrote, and its finish adds the user's message and
// the answer to the 21 it starts with (/Chat finishes with the same
// transcript, the cheapest write).
func benchGrowingTurns(b *testing.B, resp []byte, sess string) {
	srv := redistest.Start(b)
	cl := srv.Client(b)
	ctx := context.Background()
	s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	type thread struct {
		msgs   [][]byte
		hashes []store.Hash
	}
	var mu sync.Mutex
	threads := map[string]*thread{}
	runTurns(b, cl, func(k store.Key, run string) error {
		mu.Lock()
		th := threads[k.Thread]
		if th == nil {
			th = &thread{}
			th.msgs, th.hashes = storetest.Msgs(0, 21)
			threads[k.Thread] = th
		}
		mu.Unlock()
		st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: run, TTL: 30 * time.Second, Fingerprint: "fp", Model: "m", Owner: benchOwner,
			LoadThread: true, KnownDigest: store.Digest(th.hashes), NoSystem: true})
		if err != nil {
			return err
		}
		stored := st.Thread.Hashes
		if st.Unchanged {
			stored = th.hashes
		}
		add, addHashes := storetest.Msgs(len(th.msgs), 2)
		msgs, hashes := append(th.msgs, add...), append(th.hashes, addHashes...)
		tr := store.Diff(stored, msgs, hashes)
		f := store.Finish{Status: store.Completed, Model: "m", SessionID: &sess, Usage: &store.Usage{InputTokens: 10, OutputTokens: 20},
			Response: resp, Transcript: &tr}
		if err := s.Finish(ctx, st.Lease, &f); err != nil {
			return err
		}
		th.msgs, th.hashes = msgs, hashes
		return nil
	})
}

// runTurns runs b.N turns from 32 callers, each on a thread of its own,
// and reports the server's CPU and its scripts' commands per turn.
func runTurns(b *testing.B, cl *redis.Client, turn func(k store.Key, run string) error) {
	const callers = 32
	for c := range callers {
		if err := turn(store.Key{Tenant: "t", Thread: fmt.Sprintf("th%d", c)}, fmt.Sprintf("seed%d", c)); err != nil {
			b.Fatal(err)
		}
	}
	cpu0, calls0 := serverStats(b, cl)
	b.ResetTimer()
	var wg sync.WaitGroup
	per := (b.N + callers - 1) / callers
	for c := range callers {
		wg.Go(func() {
			k := store.Key{Tenant: "t", Thread: fmt.Sprintf("th%d", c)}
			for i := range per {
				if err := turn(k, fmt.Sprintf("r%d-%d", c, i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu1, calls1 := serverStats(b, cl)
	turns := float64(per * callers)
	b.ReportMetric((cpu1-cpu0)/turns*1e6, "server-µs/turn")
	b.ReportMetric(float64(calls1-calls0)/turns, "calls/turn")
}

// TestTurnInstructions runs turns one after another against a server
// started outside the test, for counting the server's instructions per
// turn (deterministic, unlike BenchmarkServerCPU's CPU time). It runs
// only with CHRONICLE_TURNS_URL set: CHRONICLE_TURNS turns (default 100)
// of the workload CHRONICLE_TURNS_WORKLOAD, taken in turn on 4 threads
// after one turn each that seeds them (so a thread's run list stays as
// short as most are), with the tenant's run id index past the size where
// Redis makes it a hash table (as any tenant's is soon). Workloads: chat (BenchmarkServerCPU/Chat's turn: the same 21
// messages again, nothing to write), growing (2 messages appended), and
// truncate (the proxy's replace mode: the same 20 messages and a new
// answer, so the finish cuts the stored answer and appends the new one),
// and stream (a streamed replace turn: the pending turn's save of the
// request's 20 messages, which cuts the stored answer, then a finish that
// appends the new one with the stream's 20 events and no response body).
// Count with the server under callgrind, twice with different counts, and
// take the difference (what seeding and loading the scripts cost
// cancels); see store/README.md, "What a turn costs the server".
// docs/bench/2026-12-08-s24/turn-instructions.sh does it all, counting
// from processCommand (the commands' and scripts' own work, not reading
// requests and writing replies, which the recipe below also counts):
//
//	valgrind --tool=callgrind --callgrind-out-file=cg.out \
//	  --toggle-collect=readQueryFromClient --toggle-collect=handleClientsWithPendingWritesUsingThreads \
//	  redis-server --port 6390 --save '' --appendonly no &
//	CHRONICLE_TURNS_URL=redis://127.0.0.1:6390/0 CHRONICLE_TURNS=100 CHRONICLE_TURNS_WORKLOAD=chat \
//	  go test -run TestTurnInstructions -count 1 ./store/redis/
//	redis-cli -p 6390 shutdown nosave; callgrind_annotate cg.out | grep 'PROGRAM TOTALS'
func TestTurnInstructions(t *testing.T) {
	url := os.Getenv("CHRONICLE_TURNS_URL")
	if url == "" {
		t.Skip("CHRONICLE_TURNS_URL not set")
	}
	n := 100
	if v := os.Getenv("CHRONICLE_TURNS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	ctx := context.Background()
	s, err := redisstore.Open(ctx, redisstore.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	resp := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("x", 200) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}}`)
	sess := "sess"
	event := []byte(`data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]}` + "\n\n")
	events := make([][]byte, 20)
	for i := range events {
		events[i] = event
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	cl := redis.NewClient(opt)
	defer cl.Close()
	for i := range 600 {
		if err := cl.HSet(ctx, "chr:t:{t}:runids", fmt.Sprintf("old%d", i), "old").Err(); err != nil {
			t.Fatal(err)
		}
	}
	const threads = 4
	type thread struct {
		stored []store.Hash // what the last turn wrote
		msgs   [][]byte
		hashes []store.Hash
	}
	ths := make([]*thread, threads)
	for i := range ths {
		ths[i] = &thread{}
		ths[i].msgs, ths[i].hashes = storetest.Msgs(0, 21)
	}
	workload := os.Getenv("CHRONICLE_TURNS_WORKLOAD")
	for i := range n + threads {
		th := ths[i%threads]
		k := store.Key{Tenant: "t", Thread: fmt.Sprintf("cg%d", i%threads)}
		stored, msgs, hashes := th.stored, th.msgs, th.hashes
		var next [][]byte
		var nextH []store.Hash
		switch workload {
		case "chat":
			next, nextH = msgs, hashes
		case "growing":
			add, addH := storetest.Msgs(len(msgs), 2)
			if i >= threads {
				msgs, hashes = append(msgs, add...), append(hashes, addH...)
				th.msgs, th.hashes = msgs, hashes
			}
			next, nextH = msgs, hashes
		case "truncate", "stream":
			answer, ah := storetest.Msg(1000+i, "assistant")
			next, nextH = append(slices.Clone(msgs[:20]), answer), append(slices.Clone(hashes[:20]), ah)
		default:
			t.Fatalf("CHRONICLE_TURNS_WORKLOAD %q: want chat, growing, truncate or stream", workload)
		}
		st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: fmt.Sprintf("r%d", i), TTL: 30 * time.Second, Fingerprint: "fp", Model: "m", Owner: benchOwner,
			LoadThread: true, KnownDigest: store.Digest(stored), NoSystem: true})
		if err != nil {
			t.Fatal(err)
		}
		if !st.Unchanged {
			stored = st.Thread.Hashes
		}
		f := store.Finish{Status: store.Completed, Model: "m", SessionID: &sess, Usage: &store.Usage{InputTokens: 10, OutputTokens: 20},
			Response: resp}
		if workload == "stream" {
			// The pending turn's save (the request's messages), then a
			// finish with the answer and the stream's 20 events.
			if err := s.SaveTranscript(ctx, st.Lease, store.Diff(stored, next[:20], nextH[:20])); err != nil {
				t.Fatal(err)
			}
			stored = nextH[:20]
			f.Response, f.Events, f.EventsFrom = nil, events, 1
		}
		tr := store.Diff(stored, next, nextH)
		f.Transcript = &tr
		if err := s.Finish(ctx, st.Lease, &f); err != nil {
			t.Fatal(err)
		}
		th.stored = nextH
	}
	for i, th := range ths {
		got, err := s.LoadThread(ctx, store.Key{Tenant: "t", Thread: fmt.Sprintf("cg%d", i)})
		if err != nil || store.Digest(got.Hashes) != store.Digest(th.stored) {
			t.Fatalf("thread %d after the turns: %d messages, %v", i, len(got.Hashes), err)
		}
	}
}
