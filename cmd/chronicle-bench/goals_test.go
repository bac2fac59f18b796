package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// goalReport is a run that meets every goal; tests change one figure.
func goalReport() *Report {
	ms := func(f float64) int64 { return int64(f * float64(time.Millisecond)) }
	return &Report{
		Settings: &settings{Concurrency: 32, ThreadLen: 20, ThreadLenBig: 200, ScalingRate: 1000},
		Rows: []*Row{
			{Workload: "replace", Target: "go-httputil", CPUPer1k: 0.100, Added: &Dist{N: 10, P50: ms(1.0), P99: ms(5)}},
			{Workload: "replace", Target: "chronicle-pass", CPUPer1k: 0.050},
			{Workload: "replace", Target: "chronicle-redis", CPUPer1k: 0.120, Added: &Dist{N: 10, P50: ms(0.4), P99: ms(1.5)}, PairBusy: 0.97},
			{Workload: "replace-paced", Target: "chronicle-pass", CPUPer1k: 0.100},
			{Workload: "replace-paced", Target: "chronicle-redis", CPUPer1k: 0.300, Added: &Dist{N: 10, P50: ms(0.3), P99: ms(1.2)}, PairBusy: 0.55},
			{Workload: "replace-long-paced", Target: "chronicle-pass", CPUPer1k: 0.200},
			{Workload: "replace-long-paced", Target: "chronicle-redis", CPUPer1k: 0.440},
		},
		Lost: []*LostCheck{{Target: "chronicle-redis", Workload: "replace", OK2xx: 100, Stored: 100}},
		Streams: []*StreamsCheck{
			{Target: "chronicle-redis", Streams: 2000, OK: 2000, KBPerStream: 60},
			{Target: "chronicle-embedded", Streams: 2000, OK: 2000, KBPerStream: 90}, // not judged
		},
		HOL: []*HOLCheck{
			{Target: "direct", WithGapP99: ms(20), WithTTFE99: ms(20)},
			{Target: "go-httputil", WithGapP99: ms(40), WithTTFE99: ms(40)}, // a baseline: not judged
			{Target: "chronicle-redis", WithGapP99: ms(22), WithTTFE99: ms(19)},
			{Target: "chronicle-embedded", WithGapP99: ms(24), WithTTFE99: ms(21)},
		},
	}
}

func TestEvaluateGoals(t *testing.T) {
	met := func(gs []Goal) map[string]string {
		m := map[string]string{}
		for _, g := range gs {
			m[g.Name] = g.Met
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		change func(r *Report)
		goal   string
		want   string
		// measured, when set, must appear in the goal's figure.
		measured string
	}{
		{"pass-through met", nil, "pass-through CPU", "yes", "0.50×"},
		{"redis CPU met", nil, "persisted CPU (Redis)", "yes", "1.20×"},
		{"redis CPU over", func(r *Report) { r.Rows[2].CPUPer1k = 0.131 }, "persisted CPU (Redis)", "no", "1.31×"},
		{"no baseline", func(r *Report) { r.Rows = r.Rows[1:] }, "persisted CPU (Redis)", "-", ""},
		{"latency met", nil, "added latency (Redis)", "yes", "p50 +400µs"},
		{"latency p99 over", func(r *Report) { r.Rows[2].Added.P99 = int64(2 * time.Millisecond) }, "added latency (Redis)", "no", "p99 +2.00ms"},
		{"latency at one load met", nil, "added latency at one load (Redis)", "yes", "p99 +1.20ms"},
		{"latency at one load over", func(r *Report) { r.Rows[4].Added.P50 = int64(600 * time.Microsecond) }, "added latency at one load (Redis)", "no", "p50 +600µs"},
		{"latency at one load unpaired", func(r *Report) { r.Rows[4].Added = nil }, "added latency at one load (Redis)", "-", ""},
		{"nothing lost", nil, "nothing lost", "yes", "100 stored of 100 answered in 1 phase"},
		{"nothing lost in two phases", func(r *Report) {
			r.Lost = append(r.Lost, &LostCheck{Target: "chronicle-redis", Workload: "append", OK2xx: 50, Stored: 50})
		}, "nothing lost", "yes", "150 stored of 150 answered in 2 phases"},
		{"a turn lost", func(r *Report) { r.Lost[0].Stored = 99 }, "nothing lost", "no", "99 stored of 100"},
		{"lost unverified", func(r *Report) { r.Lost[0].Unverified = "no API" }, "nothing lost", "-", ""},
		// (0.44-0.20)/(0.30-0.10) = 1.2
		{"scaling met", nil, "thread-length scaling (Redis)", "yes", "1.20×"},
		{"scaling over", func(r *Report) { r.Rows[6].CPUPer1k = 0.520 }, "thread-length scaling (Redis)", "no", "1.60×"},
		{"streams met", nil, "open streams (Redis)", "yes", "60.0 KiB"},
		{"streams over", func(r *Report) { r.Streams[0].KBPerStream = 64.2 }, "open streams (Redis)", "no", "64.2 KiB"},
		{"a stream broken", func(r *Report) { r.Streams[0].OK = 1999 }, "open streams (Redis)", "no", "1999 of 2000"},
		{"head-of-line met", nil, "head-of-line", "yes", "+4.00ms (chronicle-embedded gap)"},
		{"head-of-line over", func(r *Report) { r.HOL[2].WithTTFE99 = int64(26 * time.Millisecond) }, "head-of-line", "no", "+6.00ms (chronicle-redis first event)"},
		{"no direct", func(r *Report) { r.HOL = r.HOL[1:] }, "head-of-line", "-", ""},
		// chat: (0.100 + 0.025) / 0.100
		{"total met", withChat, "total CPU, chat (Redis)", "yes", "1.25× (0.100 + 0.025 against 0.100"},
		{"total over", func(r *Report) { withChat(r); r.Rows[len(r.Rows)-3].StoreCPU1k = 0.040 }, "total CPU, chat (Redis)", "no", "1.40×"},
		{"total without the store's CPU", func(r *Report) { withChat(r); r.Rows[len(r.Rows)-3].StoreCPU1k = 0 }, "total CPU, chat (Redis)", "-", ""},
		{"store turn met", withChat, "Redis server CPU per turn", "yes", "25 µs (chat), 40000 turns/s per Redis core"},
		{"store turn over", func(r *Report) { withChat(r); r.Rows[len(r.Rows)-3].StoreCPU1k = 0.060 }, "Redis server CPU per turn", "no", "60 µs (chat)"},
		{"embedded met", withChat, "embedded, chat", "yes", "1.40× CPU, 60% of the requests/s"},
		{"embedded slow", func(r *Report) { withChat(r); r.Rows[len(r.Rows)-1].RPS = 400 }, "embedded, chat", "no", "40% of the requests/s"},
		{"embedded not run", nil, "embedded, chat", "-", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := goalReport()
			if tc.change != nil {
				tc.change(r)
			}
			gs := evaluateGoals(r)
			if got := met(gs)[tc.goal]; got != tc.want {
				t.Fatalf("%s: met %q, want %q (%+v)", tc.goal, got, tc.want, gs)
			}
			for _, g := range gs {
				if g.Name == tc.goal && !strings.Contains(g.Measured, tc.measured) {
					t.Fatalf("%s: measured %q, want it to contain %q", tc.goal, g.Measured, tc.measured)
				}
			}
		})
	}
}

// withChat adds a chat workload: go-httputil, chronicle-redis with its
// server's CPU, chronicle-pass, chronicle-embedded (the last three rows, in
// that order).
func withChat(r *Report) {
	r.Rows = append(r.Rows,
		&Row{Workload: "chat", Target: "go-httputil", CPUPer1k: 0.100, RPS: 1200},
		&Row{Workload: "chat", Target: "chronicle-redis", CPUPer1k: 0.100, StoreCPU1k: 0.025, RPS: 900},
		&Row{Workload: "chat", Target: "chronicle-pass", CPUPer1k: 0.050, RPS: 1000},
		&Row{Workload: "chat", Target: "chronicle-embedded", CPUPer1k: 0.140, RPS: 600})
}

func TestPrintGoals(t *testing.T) {
	r := goalReport()
	r.Rows = r.Rows[1:] // no go-httputil: two goals not measured
	var b bytes.Buffer
	printGoals(&b, evaluateGoals(r))
	out := b.String()
	for _, want := range []string{"not measured", "machine 97% busy during the paired phase", "at 32 connections sending 1000 requests/s together (replace-paced)", "open streams (Redis)"} {
		if !strings.Contains(out, want) {
			t.Errorf("goals table lacks %q:\n%s", want, out)
		}
	}
}

// The head-of-line goal notes the go-httputil baseline's own excess over
// direct's, so a reader tells the machine's share from chronicle's.
func TestHOLNoteNamesBaseline(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(r *Report)
		want   string
	}{
		{"baseline ran", nil, "go-httputil +20.0ms (first event)"},
		{"baseline gap worse", func(r *Report) { r.HOL[1].WithGapP99 = int64(45 * time.Millisecond) }, "go-httputil +25.0ms (gap)"},
		{"no baseline", func(r *Report) { r.HOL = append(r.HOL[:1], r.HOL[2:]...) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := goalReport()
			if tc.change != nil {
				tc.change(r)
			}
			for _, g := range evaluateGoals(r) {
				if g.Name == "head-of-line" && g.Note != tc.want {
					t.Fatalf("head-of-line note %q, want %q", g.Note, tc.want)
				}
			}
		})
	}
}

// A phase the flags skipped leaves its goal unmeasured, and its target
// names the flag, not a setting of 0.
func TestGoalTargetsOfSkippedPhases(t *testing.T) {
	r := goalReport()
	r.Settings.ScalingRate, r.Settings.ThreadLenBig = 0, 0
	want := map[string]string{
		"added latency at one load (Redis)": "sending --scaling-rate requests/s together",
		"thread-length scaling (Redis)":     "at --thread-len-long messages",
	}
	for _, g := range evaluateGoals(r) {
		w, ok := want[g.Name]
		if !ok {
			continue
		}
		delete(want, g.Name)
		if !strings.Contains(g.Target, w) {
			t.Errorf("%s: target %q, want it to contain %q", g.Name, g.Target, w)
		}
	}
	for name := range want {
		t.Errorf("no goal %q", name)
	}
}

func TestBusyShare(t *testing.T) {
	if b, tot, ok := machineTicks(); ok && (tot == 0 || b > tot) {
		t.Fatalf("machineTicks: busy %d of %d", b, tot)
	}
	for _, tc := range []struct {
		b0, t0, b1, t1 uint64
		want           float64
	}{
		{100, 400, 250, 600, 0.75},
		{100, 400, 100, 400, 0}, // no time passed
		{100, 400, 90, 600, 0},  // a counter went back
	} {
		if got := busyShare(tc.b0, tc.t0, tc.b1, tc.t1); got != tc.want {
			t.Errorf("busyShare(%d,%d,%d,%d) = %v, want %v", tc.b0, tc.t0, tc.b1, tc.t1, got, tc.want)
		}
	}
}

// The total table adds the store server's CPU to the proxy's and turns it
// into a cost per turn and the turns one store core carries.
func TestTotalRows(t *testing.T) {
	r := goalReport()
	withChat(r)
	_, rows := totalRows(r.Rows)
	var chat []string
	for _, row := range rows {
		if row[0] == "chat" && row[1] == "chronicle-redis" {
			chat = row
		}
	}
	want := []string{"chat", "chronicle-redis", "0.100", "0.025", "0.125", "0.100", "1.25×", "25", "40000"}
	if strings.Join(chat, "|") != strings.Join(want, "|") {
		t.Fatalf("chat row %q, want %q (all: %q)", chat, want, rows)
	}
}
