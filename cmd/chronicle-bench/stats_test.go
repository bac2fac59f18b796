package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/google/go-cmp/cmp"
)

func TestPercentile(t *testing.T) {
	hundred := make([]int64, 100)
	for i := range hundred {
		hundred[i] = int64(i + 1)
	}
	tests := []struct {
		name   string
		sorted []int64
		p      float64
		want   int64
	}{
		{"empty", nil, 50, 0},
		{"one", []int64{7}, 99, 7},
		{"p50 of 1..100", hundred, 50, 50},
		{"p90 of 1..100", hundred, 90, 90},
		{"p99 of 1..100", hundred, 99, 99},
		{"p100 is the max", hundred, 100, 100},
		{"nearest rank rounds up", []int64{1, 2, 3}, 50, 2},
		{"tiny p is the min", []int64{1, 2, 3}, 0.1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.sorted, tt.p); got != tt.want {
				t.Errorf("percentile(%v, %v) = %d, want %d", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarizeDoesNotReorderInput(t *testing.T) {
	in := []int64{5, 1, 4, 2, 3}
	got := summarize(in)
	want := Dist{N: 5, P50: 3, P90: 5, P99: 5, Max: 5}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("summarize (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{5, 1, 4, 2, 3}, in); diff != "" {
		t.Errorf("input changed (-want +got):\n%s", diff)
	}
}

// The added latency is the percentile of per-request differences, not the
// difference of percentiles: one slow direct request paired with a fast
// proxied one gives a negative difference.
func TestAddedIsPercentileOfPairDifferences(t *testing.T) {
	pairs := []Pair{{10, 12}, {10, 13}, {50, 11}, {10, 14}}
	if diff := cmp.Diff([]int64{2, 3, -39, 4}, pairDiffs(pairs)); diff != "" {
		t.Errorf("pairDiffs (-want +got):\n%s", diff)
	}
	got := addedDist(pairs)
	want := &Dist{N: 4, P50: 2, P90: 4, P99: 4, Max: 4}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("addedDist (-want +got):\n%s", diff)
	}
	// The difference of medians would be 12-10 or 13-10; what the pairs say
	// differs once a direct outlier is paired.
	if addedDist(nil) != nil {
		t.Errorf("addedDist(nil) is not nil")
	}
}

func TestFmtDur(t *testing.T) {
	tests := []struct {
		ns   int64
		want string
	}{
		{500, "500ns"},
		{int64(850 * time.Microsecond), "850µs"},
		{int64(1240 * time.Microsecond), "1.24ms"},
		{int64(42300 * time.Microsecond), "42.3ms"},
		{int64(2100 * time.Millisecond), "2.10s"},
		{-int64(1240 * time.Microsecond), "-1.24ms"},
	}
	for _, tt := range tests {
		if got := fmtDur(tt.ns); got != tt.want {
			t.Errorf("fmtDur(%d) = %q, want %q", tt.ns, got, tt.want)
		}
	}
	if got := fmtSigned(int64(time.Millisecond)); got != "+1.00ms" {
		t.Errorf("fmtSigned(1ms) = %q", got)
	}
}

func TestRenderTable(t *testing.T) {
	var b bytes.Buffer
	renderTable(&b, []string{"target", "req", "p50"}, [][]string{
		{"direct", "7646", "1.62ms"},
		{"chronicle-pass", "12", "850µs"},
	}, 1)
	want := strings.Join([]string{
		"target           req     p50",
		"--------------  ----  ------",
		"direct          7646  1.62ms",
		"chronicle-pass    12   850µs",
		"",
	}, "\n")
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("renderTable (-want +got):\n%s", diff)
	}
}

func TestMainRowsDashesWhatWasNotMeasured(t *testing.T) {
	rows := []*Row{{Workload: "chat", Target: "direct", Requests: 10, RPS: 5,
		Latency: Dist{N: 10, P50: 1e6, P90: 2e6, P99: 3e6, Max: 4e6}, CPUPer1k: 0.25, PeakRSSKB: 2048}}
	h, out := mainRows(rows)
	if len(out) != 1 || len(out[0]) != len(h) {
		t.Fatalf("mainRows: %d rows, %d cells for %d headers", len(out), len(out[0]), len(h))
	}
	got := map[string]string{}
	for i, c := range out[0] {
		got[h[i]] = c
	}
	want := map[string]string{"p50": "1.00ms", "+p50": "-", "+ttfe99": "-", "cpu s/1k": "0.250", "rss MB": "2.0", "req/s": "5"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("column %s = %q, want %q", k, got[k], v)
		}
	}
}

func TestReadEventsChecksOrderAndEnd(t *testing.T) {
	stream := "data: {\"a\":1}\n\n: keep-alive\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n"
	ref := []uint64{hashEvent([]byte(`{"a":1}`)), hashEvent([]byte(`{"a":2}`)), hashEvent([]byte(`[DONE]`))}
	tests := []struct {
		name, body string
		ok         bool
		errHas     string
	}{
		{"in order", stream, true, ""},
		{"swapped", "data: {\"a\":2}\n\ndata: {\"a\":1}\n\ndata: [DONE]\n\n", false, "event 0 differs"},
		{"lost event", "data: {\"a\":1}\n\ndata: [DONE]\n\n", false, "event 1 differs"},
		{"no DONE", "data: {\"a\":1}\n\ndata: {\"a\":2}\n\n", false, "without [DONE]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := readEvents(strings.NewReader(tt.body), time.Now(), ref, true)
			if s.ok != tt.ok || !strings.Contains(s.err, tt.errHas) {
				t.Errorf("ok=%v err=%q, want ok=%v err containing %q", s.ok, s.err, tt.ok, tt.errHas)
			}
		})
	}
}

func TestChronicleConfigParses(t *testing.T) {
	for _, c := range []struct {
		driver, fsync string
		pprof         bool
		kek           string
	}{{"embedded", "", false, ""}, {"embedded", "always", false, ""}, {"redis", "", false, ""}, {"redis", "", true, ""},
		{"embedded", "", false, "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}} {
		driver := c.driver
		y := chronicleConfig("http://127.0.0.1:1", driver, t.TempDir(), "redis://127.0.0.1:2/0", c.fsync, c.pprof, c.kek)
		cfg, err := config.Parse([]byte(y), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("%s config: %v\n%s", driver, err, y)
		}
		if cfg.Store.Encryption.Enabled != (c.kek != "") {
			t.Errorf("%s config: encryption %v", driver, cfg.Store.Encryption.Enabled)
		}
		if cfg.Store.Driver != driver || len(cfg.Connections) != 2 || cfg.Connections[0].PersistEnabled() || !cfg.Connections[1].PersistEnabled() {
			t.Errorf("%s config parsed as %+v", driver, cfg)
		}
		if want := map[string]string{"": "interval"}[c.fsync]; driver == "embedded" && cfg.Store.Fsync != want && cfg.Store.Fsync != c.fsync {
			t.Errorf("embedded config with fsync %q parsed as store.fsync %q", c.fsync, cfg.Store.Fsync)
		}
		if cfg.Admin.Pprof != c.pprof || c.pprof && cfg.Admin.Token == "" {
			t.Errorf("%s config with pprof=%v parsed as %+v", driver, c.pprof, cfg.Admin)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{0.2, 0.1, 0.9, 0.1, 0.15}, 0.15},
	} {
		in := slices.Clone(tc.in)
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("median reordered its input: %v", tc.in)
		}
	}
}
