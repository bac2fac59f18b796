package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// dash prints a distribution field or "-" when there is none.
func dash(d *Dist, f func(*Dist) int64, signed bool) string {
	if d == nil || d.N == 0 {
		return "-"
	}
	if signed {
		return fmtSigned(f(d))
	}
	return fmtDur(f(d))
}

func p50(d *Dist) int64 { return d.P50 }
func p90(d *Dist) int64 { return d.P90 }
func p99(d *Dist) int64 { return d.P99 }

func fmtCPU(sec float64) string {
	if sec <= 0 {
		return "0"
	}
	return strconv.FormatFloat(sec, 'f', 3, 64)
}

func fmtMB(kb int64) string {
	if kb <= 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(kb)/1024, 'f', 1, 64)
}

// mainRows renders the load table.
func mainRows(rows []*Row) (headers []string, out [][]string) {
	headers = []string{"workload", "target", "req", "err", "req/s", "p50", "p90", "p99", "max",
		"+p50", "+p90", "+p99", "+ttfe50", "+ttfe99", "+gap50", "+gap99", "cpu s/1k", "rss MB"}
	for _, r := range rows {
		lat := &r.Latency
		cpu := fmtCPU(r.CPUPer1k)
		if r.StoreCPU1k > 0 {
			cpu += "+" + fmtCPU(r.StoreCPU1k) + "r"
		}
		out = append(out, []string{r.Workload, r.Target, strconv.Itoa(r.Requests), strconv.Itoa(r.Errors),
			strconv.FormatFloat(r.RPS, 'f', 0, 64),
			dash(lat, p50, false), dash(lat, p90, false), dash(lat, p99, false), dash(lat, func(d *Dist) int64 { return d.Max }, false),
			dash(r.Added, p50, true), dash(r.Added, p90, true), dash(r.Added, p99, true),
			dash(r.AddedTTFE, p50, true), dash(r.AddedTTFE, p99, true),
			dash(r.AddedGap, p50, true), dash(r.AddedGap, p99, true),
			cpu, fmtMB(r.PeakRSSKB)})
	}
	return headers, out
}

// scalingRows compares CPU per request at the two thread lengths: the
// whole process, and for a persisted target its persistence work alone
// (minus chronicle-pass at the same length: relaying the bigger bodies
// costs the same with persistence off), from the rows of the workloads
// shortW and longW.
func scalingRows(rows []*Row, shortW, longW string) (headers []string, out [][]string) {
	headers = []string{"target", "cpu s/1k " + shortW, "cpu s/1k " + longW, "ratio", "persistence only", "p50 " + shortW, "p50 " + longW}
	short, long := map[string]*Row{}, map[string]*Row{}
	for _, r := range rows {
		switch r.Workload {
		case shortW:
			short[r.Target] = r
		case longW:
			long[r.Target] = r
		}
	}
	ratio := func(a, b float64) string {
		if b <= 0 {
			return "-"
		}
		return strconv.FormatFloat(a/b, 'f', 1, 64) + "x"
	}
	for _, r := range rows {
		if r.Workload != longW {
			continue
		}
		s := short[r.Target]
		if s == nil {
			continue
		}
		own := "-"
		if ps, pl := short["chronicle-pass"], long["chronicle-pass"]; ps != nil && pl != nil &&
			strings.HasPrefix(r.Target, "chronicle-") && r.Target != "chronicle-pass" {
			own = ratio(r.CPUPer1k-pl.CPUPer1k, s.CPUPer1k-ps.CPUPer1k) + " (" + fmtCPU(s.CPUPer1k-ps.CPUPer1k) + " → " + fmtCPU(r.CPUPer1k-pl.CPUPer1k) + ")"
		}
		out = append(out, []string{r.Target, fmtCPU(s.CPUPer1k), fmtCPU(r.CPUPer1k), ratio(r.CPUPer1k, s.CPUPer1k), own, fmtDur(s.Latency.P50), fmtDur(r.Latency.P50)})
	}
	return headers, out
}

// totalRows sets each persisted target's whole cost per request beside
// go-httputil's in the same workload: its own CPU and the store server's
// (the Redis target's redis-server; the embedded store is in-process), the
// store's CPU per turn and the turns one store core would carry at that
// cost.
func totalRows(rows []*Row) (headers []string, out [][]string) {
	headers = []string{"workload", "target", "proxy s/1k", "store s/1k", "total s/1k", "httputil s/1k", "total ×", "store µs/turn", "turns/s per store core"}
	base := map[string]*Row{}
	for _, r := range rows {
		if r.Target == "go-httputil" {
			base[r.Workload] = r
		}
	}
	for _, r := range rows {
		if r.Target != "chronicle-redis" && r.Target != "chronicle-embedded" {
			continue
		}
		h := base[r.Workload]
		if h == nil || h.CPUPer1k <= 0 || r.CPUPer1k <= 0 {
			continue
		}
		store, perTurn, perCore := "-", "-", "-"
		if r.StoreCPU1k > 0 {
			store = fmtCPU(r.StoreCPU1k)
			perTurn = strconv.FormatFloat(r.StoreCPU1k*1000, 'f', 0, 64)
			perCore = strconv.FormatFloat(1000/r.StoreCPU1k, 'f', 0, 64)
		}
		total := r.CPUPer1k + r.StoreCPU1k
		out = append(out, []string{r.Workload, r.Target, fmtCPU(r.CPUPer1k), store, fmtCPU(total), fmtCPU(h.CPUPer1k),
			strconv.FormatFloat(total/h.CPUPer1k, 'f', 2, 64) + "×", perTurn, perCore})
	}
	return headers, out
}

func printReport(w io.Writer, r *Report) {
	s := r.Settings
	fmt.Fprintf(w, "chronicle-bench: %d CPUs, concurrency %d, %s per phase, open loop %.0f/s, thread %d/%d messages, %d chunks (%s apart in stream), pin=%v\n\n",
		r.CPUs, s.Concurrency, phaseLen(s), s.Rate, s.ThreadLen, s.ThreadLenBig, s.Chunks, s.ChunkDelay, s.Pin)
	h, rows := mainRows(r.Rows)
	renderTable(w, h, rows, 2)
	for _, row := range r.Rows {
		for _, e := range row.ErrorSamples {
			fmt.Fprintf(w, "  error %s/%s: %s\n", row.Workload, row.Target, e)
		}
	}
	if h, rows := totalRows(r.Rows); len(rows) > 0 {
		fmt.Fprintln(w, "\ntotal CPU per request: the proxy and its store server together, against go-httputil")
		renderTable(w, h, rows, 2)
	}
	if h, rows := scalingRows(r.Rows, "replace", "replace-long"); len(rows) > 0 {
		fmt.Fprintf(w, "\nthread-length scaling (%d vs %d messages, replace mode, closed loop)\n", s.ThreadLen, s.ThreadLenBig)
		renderTable(w, h, rows, 1)
	}
	if h, rows := scalingRows(r.Rows, "replace-paced", "replace-long-paced"); len(rows) > 0 {
		fmt.Fprintf(w, "\nthread-length scaling at one load (%d vs %d messages, replace mode, %g requests/s)\n", s.ThreadLen, s.ThreadLenBig, s.ScalingRate)
		renderTable(w, h, rows, 1)
	}
	if len(r.Lost) > 0 {
		fmt.Fprintln(w, "\nnothing lost: completed runs stored vs. 2xx answers received")
		var rows [][]string
		for _, l := range r.Lost {
			verdict := "ok"
			switch {
			case l.Unverified != "":
				verdict = "UNVERIFIED"
			case l.Failed():
				verdict = "LOST " + strconv.Itoa(l.OK2xx-l.Stored)
			}
			stored := strconv.Itoa(l.Stored)
			if l.Unverified != "" {
				stored = "?"
			}
			rows = append(rows, []string{l.Target, l.Workload, strconv.Itoa(l.Threads), strconv.Itoa(l.OK2xx), stored, verdict})
		}
		renderTable(w, []string{"target", "workload", "threads", "2xx", "stored", "verdict"}, rows, 2)
		seen := map[string]bool{}
		for _, l := range r.Lost {
			if l.Unverified != "" && !seen[l.Unverified] {
				seen[l.Unverified] = true
				fmt.Fprintf(w, "  unverified: %s\n", l.Unverified)
			}
			for _, m := range l.Mismatches[:min(len(l.Mismatches), 3)] {
				fmt.Fprintf(w, "  %s/%s: %s\n", l.Target, l.Workload, m)
			}
		}
	}
	if len(r.Streams) > 0 {
		fmt.Fprintf(w, "\nconcurrent slow streams (%d at once, %d events %s apart; order checked against direct)\n", s.Streams, s.Chunks, s.SlowDelay)
		var rows [][]string
		for _, c := range r.Streams {
			rows = append(rows, []string{c.Target, strconv.Itoa(c.OK), strconv.Itoa(c.Failed), strconv.FormatFloat(c.Seconds, 'f', 2, 64),
				fmtMB(c.BaseRSSKB), fmtMB(c.PeakRSSKB), strconv.FormatFloat(c.KBPerStream, 'f', 1, 64),
				strconv.FormatFloat(c.AnonKBPerStream, 'f', 1, 64)})
		}
		renderTable(w, []string{"target", "ok", "failed", "seconds", "rss MB before", "rss MB peak", "KB/stream", "anon KB/stream"}, rows, 1)
		for _, c := range r.Streams {
			for _, e := range c.ErrorSamples {
				fmt.Fprintf(w, "  %s: %s\n", c.Target, e)
			}
		}
	}
	if len(r.HOL) > 0 {
		fmt.Fprintf(w, "\nhead-of-line: 4 small streams (1ms apart) alone, then beside back-to-back %.1f MB requests on another connection\n", float64(s.HOLBytes)/(1<<20))
		var rows [][]string
		for _, x := range r.HOL {
			rows = append(rows, []string{x.Target, strconv.Itoa(x.Streams), fmtDur(x.AloneGapP99), fmtDur(x.WithGapP99),
				fmtDur(x.AloneTTFE99), fmtDur(x.WithTTFE99), fmt.Sprintf("%d/%d", x.BigOK, x.BigSent), fmtDur(x.BigP50), strconv.Itoa(x.Errors)})
		}
		renderTable(w, []string{"target", "streams", "gap p99 alone", "gap p99 with big", "ttfe p99 alone", "ttfe p99 with big", "big ok", "big p50", "err"}, rows, 1)
		for _, x := range r.HOL {
			for _, e := range x.ErrSamples {
				fmt.Fprintf(w, "  %s: %s\n", x.Target, e)
			}
		}
	}
	if len(r.Goals) > 0 {
		fmt.Fprintln(w, "\ngoals (a goal missed does not fail the run)")
		printGoals(w, r.Goals)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	if r.Failed {
		fmt.Fprintf(w, "\nRESULT: FAILED (requests failed, or stored turns differ from 2xx answers): %s\n", strings.Join(failures(r), ", "))
	} else {
		fmt.Fprintln(w, "\nRESULT: ok")
	}
}

func phaseLen(s *settings) string {
	l := s.Duration.String()
	if s.Requests > 0 {
		l = strconv.Itoa(s.Requests) + " requests"
	}
	if s.Rounds > 1 {
		l += fmt.Sprintf(" in %d rounds", s.Rounds)
	}
	return l
}
