package spool

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	redisstore "github.com/chronicle-proxy/chronicle/store/redis"
	"github.com/chronicle-proxy/chronicle/store/redistest"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

// TestConformance: the spool is a store like its backend; with the backend
// up it changes nothing the conformance suite checks.
func TestConformance(t *testing.T) {
	storetest.RunTests(t, func(t testing.TB, now func() time.Time) store.Store {
		srv := redistest.Start(t)
		b, err := redisstore.Open(context.Background(), redisstore.Options{URL: srv.URL(), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(b, Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// faultRedis is a redis-server with AOF on, as production runs it, and a
// Redis store on it behind a spool.
type faultRedis struct {
	srv *redistest.Server
	dir string
}

func startFaultRedis(t *testing.T) *faultRedis {
	return &faultRedis{srv: redistest.Start(t, "--appendonly", "yes", "--appendfsync", "always"), dir: t.TempDir()}
}

func (f *faultRedis) open(t *testing.T, o Options) (*Store, *redisstore.Store) {
	t.Helper()
	b, err := redisstore.Open(context.Background(), redisstore.Options{URL: f.srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	o.Dir = f.dir
	s, err := Open(b, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, b
}

// pendingTurn starts a run on k with its input saved, as the proxy does
// before it relays a stream, and returns the lease and the finish that
// adds the reply.
func pendingTurn(t *testing.T, s store.Store, k store.Key, run string) (store.Lease, *store.Finish) {
	t.Helper()
	ctx := context.Background()
	st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: run, Owner: "replica-a", TTL: 30 * time.Second, Fingerprint: run})
	if err != nil {
		t.Fatal(err)
	}
	in, inHash := storetest.Msg(1, "user")
	if err := s.SaveTranscript(ctx, st.Lease, store.Transcript{Messages: [][]byte{in}, Hashes: []store.Hash{inHash}}); err != nil {
		t.Fatal(err)
	}
	reply, replyHash := storetest.Msg(2, "assistant")
	tr := store.Transcript{Keep: 1, KeepHash: inHash, Messages: [][]byte{reply}, Hashes: []store.Hash{replyHash}}
	return st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr, Usage: &store.Usage{InputTokens: 5, OutputTokens: 7},
		EventsFrom: 1, Events: [][]byte{[]byte("data: one\n\n"), []byte("data: [DONE]\n\n")}}
}

func checkCompleted(t *testing.T, s store.Store, k store.Key, run string) {
	t.Helper()
	ctx := context.Background()
	r, err := s.GetRun(ctx, k, run)
	if err != nil || r.Status != store.Completed || r.Usage == nil || r.Usage.OutputTokens != 7 {
		t.Fatalf("run %s: %+v %v", run, r, err)
	}
	th, err := s.LoadThread(ctx, k)
	if err != nil || len(th.Messages) != 2 {
		t.Fatalf("thread %s: %d messages, %v", k, len(th.Messages), err)
	}
}

// TestFinishSpooledThroughRedisRestart: Redis dies before a run's finish;
// the finish is spooled, the thread answers ErrUnavailable (never a stale
// view) until the store is back, and the replay lands the turn once.
func TestFinishSpooledThroughRedisRestart(t *testing.T) {
	f := startFaultRedis(t)
	s, _ := f.open(t, Options{Fsync: true, RetryMin: time.Hour}) // the test replays by hand
	ctx := context.Background()
	k := store.Key{Tenant: "t", Thread: "restart"}
	l, fin := pendingTurn(t, s, k, "r1")

	f.srv.Kill()
	if err := s.Finish(ctx, l, fin); err != nil {
		t.Fatalf("finish with Redis down: %v, want it spooled", err)
	}
	if st := s.Stats(); st.Entries != 1 || st.Spooled != 1 || st.Bytes == 0 || st.Oldest.IsZero() {
		t.Fatalf("stats after spooling: %+v", st)
	}
	if _, err := s.LoadThread(ctx, k); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("read of a thread with a spooled turn, store down: %v, want ErrUnavailable", err)
	}
	if _, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r2", Owner: "replica-a", TTL: time.Minute}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("start on a thread with a spooled turn, store down: %v, want ErrUnavailable", err)
	}

	f.srv.Restart(t)
	// go-redis answers its last dial error for a while after a restart;
	// once the store answers, a read of the thread replays first and sees
	// the turn.
	drain(t, s)
	checkCompleted(t, s, k, "r1")
	if st := s.Stats(); st.Entries != 0 || st.Replayed != 1 || st.Conflicts != 0 {
		t.Fatalf("stats after the replay: %+v", st)
	}
	var events []store.Event
	if err := s.FollowEvents(ctx, k, "r1", 0, func(e store.Event) error { events = append(events, e); return nil }); err != nil || len(events) != 2 {
		t.Fatalf("event log after the replay: %d events, %v", len(events), err)
	}
	if fi, err := os.Stat(filepath.Join(f.dir, journalName)); err != nil || fi.Size() != 0 {
		t.Fatalf("journal after the replay: %v %v", fi, err)
	}
}

// TestJournalReplayedAtStart: a replica that stops with a non-empty
// journal replays it when it starts again, and a write applied twice (the
// first attempt reached Redis after all) changes nothing.
func TestJournalReplayedAtStart(t *testing.T) {
	f := startFaultRedis(t)
	s, _ := f.open(t, Options{RetryMin: time.Hour})
	ctx := context.Background()
	k := store.Key{Tenant: "t", Thread: "restart-replica"}
	l, fin := pendingTurn(t, s, k, "r1")
	k2 := store.Key{Tenant: "t", Thread: "applied-twice"}
	l2, fin2 := pendingTurn(t, s, k2, "r2")
	if err := s.Store.Finish(ctx, l2, fin2); err != nil {
		t.Fatal(err)
	}
	f.srv.Kill()
	if err := s.Finish(ctx, l, fin); err != nil {
		t.Fatal(err)
	}
	// The second finish reached Redis before it died; the spool, not
	// knowing, keeps it too.
	if err := s.spool(&entry{Op: opFinish, Lease: l2, Finish: fin2}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f.srv.Restart(t)
	s2, _ := f.open(t, Options{RetryMin: time.Hour})
	if st := s2.Stats(); st.Entries != 2 {
		t.Fatalf("journal at start: %+v", st)
	}
	drain(t, s2)
	checkCompleted(t, s2, k, "r1")
	checkCompleted(t, s2, k2, "r2")
	if st := s2.Stats(); st.Replayed != 2 || st.Conflicts != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

// TestReplayFencedByNewerLease: a spooled finish whose thread moved on
// under a newer lease (its own was swept and another run started) is
// refused by the store's fencing, counted as a conflict and dropped; it
// never overwrites the newer history.
func TestReplayFencedByNewerLease(t *testing.T) {
	f := startFaultRedis(t)
	clock := storetest.NewClock()
	b, err := redisstore.Open(context.Background(), redisstore.Options{URL: f.srv.URL(), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(b, Options{Dir: f.dir, RetryMin: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	k := store.Key{Tenant: "t", Thread: "fenced"}
	l, fin := pendingTurn(t, s, k, "r1")
	// While the store is out of reach for this replica: the lease runs
	// out, another replica sweeps the run and starts a new one.
	clock.Advance(time.Minute)
	if _, err := b.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.StartRun(ctx, store.StartRun{Key: k, RunID: "r2", Owner: "replica-b", TTL: time.Minute, Fingerprint: "r2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.spool(&entry{Op: opFinish, Lease: l, Finish: fin}, nil); err != nil {
		t.Fatal(err)
	}
	if left := s.Flush(ctx); left != 0 {
		t.Fatalf("%d left", left)
	}
	if st := s.Stats(); st.Conflicts != 1 || st.Lost != 1 || st.Replayed != 0 {
		t.Fatalf("stats: %+v", st)
	}
	if r, _ := b.GetRun(ctx, k, "r1"); r.Status != store.Failed || r.Reason != store.ReasonProxyLost {
		t.Fatalf("fenced run: %s %s", r.Status, r.Reason)
	}
}

// TestSpoolFull: a write that would pass the cap is kept nowhere, and the
// caller learns it (ErrFull, ErrUnavailable).
func TestSpoolFull(t *testing.T) {
	f := startFaultRedis(t)
	s, _ := f.open(t, Options{MaxBytes: 64, RetryMin: time.Hour})
	k := store.Key{Tenant: "t", Thread: "full"}
	l, fin := pendingTurn(t, s, k, "r1")
	f.srv.Kill()
	err := s.Finish(context.Background(), l, fin)
	if !errors.Is(err, ErrFull) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("finish into a full spool: %v", err)
	}
	if st := s.Stats(); st.Entries != 0 || st.Full != 1 {
		t.Fatalf("stats: %+v", st)
	}
}

func records(t testing.TB, n int) []byte {
	var buf bytes.Buffer
	for i := range n {
		msg, h := storetest.Msg(i, "user")
		rec, err := encodeRecord(&entry{Op: opFinish, Lease: store.Lease{Key: store.Key{Tenant: "t", Thread: "x"}, RunID: "r", Token: int64(i + 1)},
			Finish: &store.Finish{Status: store.Completed, Transcript: &store.Transcript{Messages: [][]byte{msg}, Hashes: []store.Hash{h}}}})
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(rec)
	}
	return buf.Bytes()
}

// TestJournalTornAndDamaged: a journal cut inside a record, or with a
// record whose checksum fails, is read up to the last good record and
// cut there; appends then go on from that point.
func TestJournalTornAndDamaged(t *testing.T) {
	whole := records(t, 3)
	first := records(t, 1)
	tests := []struct {
		name string
		file []byte
		want int
	}{
		{"whole", whole, 3},
		{"cut in the header", whole[:len(whole)-len(first)+3], 2},
		{"cut in the payload", whole[:len(whole)-5], 2},
		{"damaged second", func() []byte {
			b := bytes.Clone(whole)
			b[len(first)+headerSize+10] ^= 0xff
			return b
		}(), 1},
		{"empty", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, journalName), tc.file, 0o600); err != nil {
				t.Fatal(err)
			}
			j, entries, torn, err := openJournal(dir, true)
			if err != nil {
				t.Fatal(err)
			}
			if len(entries) != tc.want || torn != (tc.want < 3 && tc.file != nil) {
				t.Fatalf("%d entries, torn %v", len(entries), torn)
			}
			for i, e := range entries {
				if e.Lease.Token != int64(i+1) || len(e.Finish.Transcript.Messages) != 1 {
					t.Fatalf("entry %d: %+v", i, e)
				}
			}
			if err := j.append(records(t, 1)); err != nil {
				t.Fatal(err)
			}
			j.close()
			_, entries, torn, err = openJournal(dir, true)
			if err != nil || torn || len(entries) != tc.want+1 {
				t.Fatalf("after an append: %d entries, torn %v, %v", len(entries), torn, err)
			}
		})
	}
}

// FuzzJournal: no input makes the reader panic, allocate without bound,
// or report more good bytes than it read.
func FuzzJournal(f *testing.F) {
	f.Add(records(f, 2))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		entries, good, _ := readRecords(bytes.NewReader(b))
		if good > int64(len(b)) {
			t.Fatalf("good %d of %d bytes", good, len(b))
		}
		var sum int64
		for _, e := range entries {
			sum += e.size
		}
		if sum != good {
			t.Fatalf("entries cover %d bytes, good %d", sum, good)
		}
	})
}

// TestStartOffline: a run started while Redis is down (on_store_error:
// pass) is journalled from its start; its writes queue behind the start,
// and the replay starts it in Redis, then lands its turn, under the lease
// Redis gave it. A start replayed twice (the journal replayed again after
// a crash) finds its run and changes nothing.
func TestStartOffline(t *testing.T) {
	f := startFaultRedis(t)
	s, _ := f.open(t, Options{RetryMin: time.Hour})
	ctx := context.Background()
	k := store.Key{Tenant: "t", Thread: "offline"}
	f.srv.Kill()
	st, err := s.StartOffline(ctx, store.StartRun{Key: k, RunID: "r1", Owner: "replica-a", TTL: 30 * time.Second, Fingerprint: "fp", Model: "m"})
	if err != nil || !st.Created || st.Lease.Token != 0 {
		t.Fatalf("offline start: %+v %v", st, err)
	}
	if _, err := s.Renew(ctx, st.Lease, store.RunPatch{}); err != nil {
		t.Fatalf("renewing an offline run: %v", err)
	}
	in, inHash := storetest.Msg(1, "user")
	reply, replyHash := storetest.Msg(2, "assistant")
	tr := store.Transcript{Messages: [][]byte{in, reply}, Hashes: []store.Hash{inHash, replyHash}}
	fin := &store.Finish{Status: store.Completed, Transcript: &tr, Usage: &store.Usage{InputTokens: 5, OutputTokens: 7}}
	if err := s.Finish(ctx, st.Lease, fin); err != nil {
		t.Fatalf("finish of an offline run: %v", err)
	}
	if got := s.Stats().Entries; got != 2 {
		t.Fatalf("%d entries, want the start and the finish", got)
	}
	f.srv.Restart(t)
	drain(t, s)
	checkCompleted(t, s, k, "r1")
	if st := s.Stats(); st.Replayed != 2 || st.Conflicts != 0 {
		t.Fatalf("stats: %+v", st)
	}
	// The same two entries again, as after a crash before the rewrite.
	if err := s.spool(&entry{Op: opStart, Lease: st.Lease, Start: &store.StartRun{Key: k, RunID: "r1", Owner: "replica-a", TTL: time.Minute, Fingerprint: "fp"}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.spool(&entry{Op: opFinish, Lease: st.Lease, Finish: fin}, nil); err != nil {
		t.Fatal(err)
	}
	if left := s.Flush(ctx); left != 0 {
		t.Fatalf("%d left", left)
	}
	checkCompleted(t, s, k, "r1")
	if st := s.Stats(); st.Conflicts != 0 {
		t.Fatalf("a replay repeated made conflicts: %+v", st)
	}
}

// BenchmarkStore: the conformance benchmarks on Redis behind the spool,
// to set beside store/redis's BenchmarkStore (the spool's cost with an
// empty journal).
func BenchmarkStore(b *testing.B) {
	storetest.RunBenchmarks(b, func(t testing.TB, now func() time.Time) store.Store {
		srv := redistest.Start(t)
		backend, err := redisstore.Open(context.Background(), redisstore.Options{URL: srv.URL(), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(backend, Options{Dir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestRebuildWhatTheStoreLost: Redis acknowledged a run's start and its
// pending turn, then lost them (a crash inside appendfsync everysec's
// window, a failover before they replicated); the run's finish, spooled,
// carries what it needs to stand on its own. The replay starts the run
// again and writes the whole turn; unless the thread moved past it in the
// meantime, which stays as it is (a conflict, counted as lost).
func TestRebuildWhatTheStoreLost(t *testing.T) {
	for _, movedOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("moved on %v", movedOn), func(t *testing.T) {
			f := startFaultRedis(t)
			s, b := f.open(t, Options{RetryMin: time.Hour})
			ctx := context.Background()
			k := store.Key{Tenant: "t", Thread: "lost"}
			l, fin := pendingTurn(t, s, k, "r1")
			fin.Rebuild = &store.Rebuild{
				Start: store.StartRun{Key: k, RunID: "r1", Owner: "replica-a", TTL: 30 * time.Second, Fingerprint: "r1"},
				Transcript: store.Transcript{Messages: [][]byte{mustMsg(1, "user"), mustMsg(2, "assistant")},
					Hashes: []store.Hash{hashOf(1, "user"), hashOf(2, "assistant")}},
			}
			if err := f.srv.Client(t).FlushAll(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			var newer []byte
			if movedOn {
				nl, nf := pendingTurn(t, b, k, "r2")
				if err := b.Finish(ctx, nl, nf); err != nil {
					t.Fatal(err)
				}
				th, _ := b.LoadThread(ctx, k)
				newer = bytes.Join(th.Messages, []byte{','})
				nt := store.Transcript{Keep: 2, KeepHash: th.Hashes[1], Messages: [][]byte{mustMsg(9, "user")}, Hashes: []store.Hash{hashOf(9, "user")}}
				nl2, err := b.StartRun(ctx, store.StartRun{Key: k, RunID: "r3", Owner: "b", TTL: time.Minute, Fingerprint: "r3"})
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Finish(ctx, nl2.Lease, &store.Finish{Status: store.Completed, Transcript: &nt}); err != nil {
					t.Fatal(err)
				}
				th, _ = b.LoadThread(ctx, k)
				newer = bytes.Join(th.Messages, []byte{','})
			}
			if err := s.spool(&entry{Op: opFinish, Lease: l, Finish: fin}, nil); err != nil {
				t.Fatal(err)
			}
			if left := s.Flush(ctx); left != 0 {
				t.Fatalf("%d left", left)
			}
			st := s.Stats()
			if !movedOn {
				checkCompleted(t, s, k, "r1")
				if st.Lost != 0 {
					t.Fatalf("stats: %+v", st)
				}
				return
			}
			th, _ := b.LoadThread(ctx, k)
			if got := bytes.Join(th.Messages, []byte{','}); !bytes.Equal(got, newer) || st.Lost != 1 {
				t.Fatalf("the newer history changed, or the lost turn is not counted: %+v\n%s\n%s", st, got, newer)
			}
			if r, _ := b.GetRun(ctx, k, "r1"); r.Status != store.Failed {
				t.Fatalf("the restarted run was left %s", r.Status)
			}
		})
	}
}

func mustMsg(i int, role string) []byte { m, _ := storetest.Msg(i, role); return m }
func hashOf(i int, role string) store.Hash {
	_, h := storetest.Msg(i, role)
	return h
}

// drain replays s until its journal is empty, polling while the store
// comes back (go-redis answers its last dial error for up to a second
// after a restart), not as a synchronisation.
func drain(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for s.Flush(context.Background()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not replayed: %+v", s.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
