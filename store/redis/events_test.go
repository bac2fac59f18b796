package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/redistest"
)

// blockedRead signals when a blocking XREAD is sent: a follower has read
// what there was and waits on the log.
type blockedRead struct{ blocked chan struct{} }

func (h *blockedRead) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *blockedRead) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "xread" && slices.Contains(cmd.Args(), any("block")) {
			select {
			case h.blocked <- struct{}{}:
			default:
			}
		}
		return next(ctx, cmd)
	}
}
func (h *blockedRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestRunWithoutEventsHasNoLog: a run that ends without events (a turn
// that was not streamed) leaves no event log key behind, unless a
// follower waits on it: then its end marker is written, and it is what
// wakes the follower (without it the follower would only notice the end
// when its blocking read timed out).
func TestRunWithoutEventsHasNoLog(t *testing.T) {
	ctx := context.Background()
	s, cl := openOwn(t)
	k := store.Key{Tenant: "t", Thread: "quiet"}
	logLen := func(run string) int64 {
		t.Helper()
		n, err := cl.XLen(ctx, s.prefix(k)+"ev:"+run).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	start := func(run string) store.Lease { t.Helper(); return startRun(t, s, k, run) }
	finish := func(l store.Lease) {
		t.Helper()
		if err := s.Finish(ctx, l, &store.Finish{Status: store.Completed, Transcript: &store.Transcript{}}); err != nil {
			t.Fatal(err)
		}
	}

	finish(start("quiet"))
	if n := logLen("quiet"); n != 0 {
		t.Fatalf("a run without events or followers left a log of %d entries", n)
	}
	if err := s.FollowEvents(ctx, k, "quiet", 0, func(store.Event) error { return nil }); err != nil {
		t.Fatalf("following the ended run: %v", err)
	}

	l := start("followed")
	hook := &blockedRead{blocked: make(chan struct{}, 1)}
	cl.AddHook(hook)
	done := make(chan error, 1)
	go func() { done <- s.FollowEvents(ctx, k, "followed", 0, func(store.Event) error { return nil }) }()
	<-hook.blocked
	finish(l)
	if err := <-done; err != nil {
		t.Fatalf("follower: %v", err)
	}
	if n := logLen("followed"); n != 1 {
		t.Fatalf("a followed run without events has a log of %d entries, want its end marker", n)
	}

	l = start("streamed")
	if err := s.AppendEvents(ctx, l, 1, [][]byte{[]byte("e1")}); err != nil {
		t.Fatal(err)
	}
	finish(l)
	if n := logLen("streamed"); n != 2 {
		t.Fatalf("a streamed run's log has %d entries, want its event and end marker", n)
	}
}

// A packed batch reads back as its events, numbered up to its last; a
// malformed tail ends it.
func TestEventsBatch(t *testing.T) {
	events := [][]byte{[]byte("data: a\n\n"), {}, []byte("1:2:3"), []byte("x")}
	var got []string
	err := eachEvent(string(eventsBatch(events)), 10, func(seq int64, data string) error {
		got = append(got, string(rune('0'+seq-6))+"="+data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"1=data: a\n\n", "2=", "3=1:2:3", "4=x"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for _, bad := range []string{"5:ab", "x:ab", ":a", "-1:a"} {
		n := 0
		_ = eachEvent("1:a"+bad, 3, func(int64, string) error { n++; return nil })
		if n != 1 {
			t.Errorf("%q: %d events, want 1", "1:a"+bad, n)
		}
	}
}

func FuzzEachEvent(f *testing.F) {
	f.Add(string(eventsBatch([][]byte{[]byte("a"), []byte("bc")})), int64(5))
	f.Add("3:abc0:", int64(1))
	f.Fuzz(func(t *testing.T, batch string, last int64) {
		total := 0
		_ = eachEvent(batch, last, func(seq int64, data string) error {
			if seq > last {
				t.Fatalf("event %d past the batch's last %d", seq, last)
			}
			total += len(data)
			return nil
		})
		if total > len(batch) {
			t.Fatalf("read %d bytes of a %d-byte batch", total, len(batch))
		}
	})
}

// TestEventLogTrim: MaxEvents trims a log by sequence, keeping at least
// its newest MaxEvents events (a batch across the limit stays whole),
// whether the batch comes by AppendEvents or with the finish, which
// also ends the log and sets its expiry.
func TestEventLogTrim(t *testing.T) {
	ctx := context.Background()
	cl := redistest.Start(t).Client(t)
	s, err := Open(ctx, Options{Client: cl, MaxEvents: 3, EventRetention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	k := store.Key{Tenant: "t", Thread: "trim"}
	ev := func(from, to int) [][]byte {
		var out [][]byte
		for i := from; i <= to; i++ {
			out = append(out, []byte(fmt.Sprintf("data: %d\n\n", i)))
		}
		return out
	}
	ids := func(run string) []string {
		t.Helper()
		msgs, err := cl.XRange(ctx, s.prefix(k)+"ev:"+run, "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range msgs {
			out = append(out, m.ID)
		}
		return out
	}
	followed := func(run string) []int64 {
		t.Helper()
		var seqs []int64
		if err := s.FollowEvents(ctx, k, run, 0, func(e store.Event) error {
			if want := fmt.Sprintf("data: %d\n\n", e.Seq); string(e.Data) != want {
				t.Errorf("event %d: %q, want %q", e.Seq, e.Data, want)
			}
			seqs = append(seqs, e.Seq)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return seqs
	}
	for _, tc := range []struct {
		name         string
		appended     [][][]byte // batches by AppendEvents, numbered from 1 on
		tailFrom     int64      // the finish's batch, numbered from tailFrom
		tail         [][]byte
		wantIDs      []string
		wantFollowed []int64
		wantEvents   int64
	}{
		{"finish carries the log", nil, 1, ev(1, 4), []string{"4-0", "4-1"}, []int64{1, 2, 3, 4}, 4},
		{"finish trims", [][][]byte{ev(1, 2)}, 3, ev(3, 6), []string{"6-0", "6-1"}, []int64{3, 4, 5, 6}, 6},
		{"append trims", [][][]byte{ev(1, 2), ev(3, 5)}, 0, nil, []string{"5-0", "5-1"}, []int64{3, 4, 5}, 5},
		{"finish overlaps", [][][]byte{ev(1, 3)}, 2, ev(2, 5), []string{"3-0", "5-0", "5-1"}, []int64{1, 2, 3, 4, 5}, 5},
		{"finish gap", [][][]byte{ev(1, 1)}, 3, ev(3, 4), []string{"1-0", "1-1"}, []int64{1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := strings.ReplaceAll(tc.name, " ", "-")
			l := startRun(t, s, k, run)
			first := int64(1)
			for _, batch := range tc.appended {
				if err := s.AppendEvents(ctx, l, first, batch); err != nil {
					t.Fatal(err)
				}
				first += int64(len(batch))
			}
			f := &store.Finish{Status: store.Completed, EventsFrom: tc.tailFrom, Events: tc.tail}
			if err := s.Finish(ctx, l, f); err != nil {
				t.Fatal(err)
			}
			if got := ids(run); !slices.Equal(got, tc.wantIDs) {
				t.Errorf("log entries %v, want %v", got, tc.wantIDs)
			}
			if got := followed(run); !slices.Equal(got, tc.wantFollowed) {
				t.Errorf("followed %v, want %v", got, tc.wantFollowed)
			}
			r, err := s.GetRun(ctx, k, run)
			if err != nil {
				t.Fatal(err)
			}
			if r.Events != tc.wantEvents {
				t.Errorf("run's events %d, want %d", r.Events, tc.wantEvents)
			}
			if ttl, err := cl.PTTL(ctx, s.prefix(k)+"ev:"+run).Result(); err != nil || ttl <= 0 || ttl > time.Hour {
				t.Errorf("log's expiry %v (%v), want within an hour", ttl, err)
			}
		})
	}
}
