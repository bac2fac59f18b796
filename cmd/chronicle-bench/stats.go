package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Dist summarises a set of durations (nanoseconds; may be negative for
// differences): count, nearest-rank percentiles and the maximum.
type Dist struct {
	N   int   `json:"n"`
	P50 int64 `json:"p50_ns"`
	P90 int64 `json:"p90_ns"`
	P99 int64 `json:"p99_ns"`
	Max int64 `json:"max_ns"`
}

// percentile returns the nearest-rank p-th percentile (0 < p <= 100) of a
// sorted slice, or 0 for an empty one.
func percentile(sorted []int64, p float64) int64 {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = max(1, min(rank, n))
	return sorted[rank-1]
}

// summarize sorts a copy of xs and returns its distribution.
func summarize(xs []int64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return Dist{N: len(s), P50: percentile(s, 50), P90: percentile(s, 90), P99: percentile(s, 99), Max: s[len(s)-1]}
}

// Pair is one request sent the same way directly and through a proxy.
type Pair struct {
	Direct, Proxied int64
}

// pairDiffs returns, for each pair, the proxied value minus the direct one:
// the latency the proxy added to that request.
func pairDiffs(pairs []Pair) []int64 {
	out := make([]int64, len(pairs))
	for i, p := range pairs {
		out[i] = p.Proxied - p.Direct
	}
	return out
}

// addedDist is the distribution of the per-pair differences, or nil when
// there are no pairs.
func addedDist(pairs []Pair) *Dist {
	if len(pairs) == 0 {
		return nil
	}
	d := summarize(pairDiffs(pairs))
	return &d
}

// fmtDur prints nanoseconds compactly: 850µs, 1.24ms, 2.1s; "-" for none.
func fmtDur(ns int64) string {
	neg := ns < 0
	if neg {
		ns = -ns
	}
	var s string
	switch d := time.Duration(ns); {
	case d < time.Microsecond:
		s = fmt.Sprintf("%dns", ns)
	case d < time.Millisecond:
		s = fmt.Sprintf("%dµs", ns/1e3)
	case d < 10*time.Millisecond:
		s = fmt.Sprintf("%.2fms", float64(ns)/1e6)
	case d < time.Second:
		s = fmt.Sprintf("%.1fms", float64(ns)/1e6)
	default:
		s = fmt.Sprintf("%.2fs", float64(ns)/1e9)
	}
	if neg {
		return "-" + s
	}
	return s
}

// fmtSigned prints an added latency with an explicit sign.
func fmtSigned(ns int64) string {
	if ns >= 0 {
		return "+" + fmtDur(ns)
	}
	return fmtDur(ns)
}

// renderTable writes rows under headers with aligned columns: the first
// column (and any column whose header is in left) left-aligned, the rest
// right-aligned.
func renderTable(w io.Writer, headers []string, rows [][]string, leftCols int) {
	width := make([]int, len(headers))
	for i, h := range headers {
		width[i] = len([]rune(h))
	}
	for _, r := range rows {
		for i, c := range r {
			if i < len(width) {
				width[i] = max(width[i], len([]rune(c)))
			}
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i := range headers {
			c := ""
			if i < len(cells) {
				c = cells[i]
			}
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if i > 0 {
				b.WriteString("  ")
			}
			if i < leftCols {
				b.WriteString(c)
				if i < len(headers)-1 {
					b.WriteString(pad)
				}
			} else {
				b.WriteString(pad)
				b.WriteString(c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(headers)
	sep := make([]string, len(headers))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
	}
	line(sep)
	for _, r := range rows {
		line(r)
	}
}
