package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// Goal is one of the performance targets chronicle is held to (issue 11's
// "done when"), as this run measured it.
type Goal struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	// Met is "yes", "no", or "-" when the run did not measure it (a
	// target or workload left out, or a baseline missing).
	Met  string `json:"met"`
	Note string `json:"note,omitempty"`
}

// Goal limits.
const (
	passCPULimit  = 0.8 // chronicle-pass CPU per request over go-httputil's, replace
	redisCPULimit = 1.3 // chronicle-redis CPU per request over go-httputil's, replace
	// totalCPULimit: chronicle-redis and its redis-server together, per
	// request, over go-httputil's, in each of totalWorkloads (issue 30).
	totalCPULimit = 1.3
	// storeTurnLimit: the Redis server's CPU per non-stream turn.
	storeTurnLimit = 50e-6
	// Embedded, default fsync setting: CPU per request over go-httputil's,
	// and requests/s over chronicle-pass's, in chat and replace.
	embeddedCPULimit  = 1.5
	embeddedRateLimit = 0.5
	addedP50Limit     = 500 * time.Microsecond
	addedP99Limit     = 2 * time.Millisecond
	scalingLimit      = 1.5 // persistence CPU per request, long threads over short
	streamKBLimit     = 64.0
	holExcessLimit    = 5 * time.Millisecond
)

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "no"
}

// evaluateGoals judges the report against the goals. It neither fails
// the run nor changes it: a goal missed is a measurement, not an error.
func evaluateGoals(r *Report) []Goal {
	rows := map[string]*Row{} // workload/target
	for _, row := range r.Rows {
		rows[row.Workload+"/"+row.Target] = row
	}
	var out []Goal

	cpuRatio := func(name, target string, limit float64) {
		g := Goal{Name: name, Target: fmt.Sprintf("CPU per request ≤ %.1f× go-httputil's (replace, %s)", limit, target), Met: "-"}
		c, h := rows["replace/"+target], rows["replace/go-httputil"]
		if c != nil && h != nil && h.CPUPer1k > 0 && c.CPUPer1k > 0 {
			ratio := c.CPUPer1k / h.CPUPer1k
			g.Measured = fmt.Sprintf("%.2f× (%s against %s s per 1,000)", ratio, fmtCPU(c.CPUPer1k), fmtCPU(h.CPUPer1k))
			g.Met = yesNo(ratio <= limit)
		}
		out = append(out, g)
	}
	cpuRatio("pass-through CPU", "chronicle-pass", passCPULimit)
	cpuRatio("persisted CPU (Redis)", "chronicle-redis", redisCPULimit)
	out = append(out, totalGoals(rows)...)

	added := func(name, workload, at string) {
		g := Goal{Name: name, Met: "-",
			Target: fmt.Sprintf("p50 < %s and p99 < %s over direct at %s (%s)", fmtDur(int64(addedP50Limit)), fmtDur(int64(addedP99Limit)), at, workload)}
		c := rows[workload+"/chronicle-redis"]
		if c == nil || c.Added == nil || c.Added.N == 0 {
			out = append(out, g)
			return
		}
		g.Measured = "p50 " + fmtSigned(c.Added.P50) + ", p99 " + fmtSigned(c.Added.P99)
		g.Met = yesNo(c.Added.P50 < int64(addedP50Limit) && c.Added.P99 < int64(addedP99Limit))
		var notes []string
		if c.PairBusy > 0 {
			notes = append(notes, fmt.Sprintf("machine %.0f%% busy during the paired phase", c.PairBusy*100))
		}
		if h := rows[workload+"/go-httputil"]; h != nil && h.Added != nil && h.Added.N > 0 {
			notes = append(notes, "go-httputil adds p50 "+fmtSigned(h.Added.P50)+", p99 "+fmtSigned(h.Added.P99))
		}
		g.Note = strings.Join(notes, "; ")
		out = append(out, g)
	}
	added("added latency (Redis)", "replace", fmt.Sprintf("%d connections", r.Settings.Concurrency))
	// Not one of issue 11's goals but held to the same limits: at a load
	// the machine can carry, the latency a turn adds apart from the
	// closed loop's queueing for the cores.
	at := "--scaling-rate requests/s"
	if r.Settings.ScalingRate > 0 {
		at = fmt.Sprintf("%.0f requests/s", r.Settings.ScalingRate)
	}
	added("added latency at one load (Redis)", "replace-paced", fmt.Sprintf("%d connections sending %s together", r.Settings.Concurrency, at))

	lost := Goal{Name: "nothing lost", Target: "every 2xx answer's turn stored", Met: "-"}
	if len(r.Lost) > 0 {
		answered, stored, bad, unverified := 0, 0, 0, 0
		for _, l := range r.Lost {
			if l.Unverified != "" {
				unverified++
				continue
			}
			answered += l.OK2xx
			stored += l.Stored
			if l.Failed() {
				bad++
			}
		}
		lost.Measured = fmt.Sprintf("%d stored of %d answered in %s", stored, answered, plural(len(r.Lost)-unverified, "phase"))
		if len(r.Lost) > unverified {
			lost.Met = yesNo(bad == 0)
		}
		if unverified > 0 {
			lost.Note = plural(unverified, "phase") + " unverified"
		}
	}
	out = append(out, lost)

	long := "--thread-len-long"
	if r.Settings.ThreadLenBig > 0 {
		long = strconv.Itoa(r.Settings.ThreadLenBig)
	}
	scale := Goal{Name: "thread-length scaling (Redis)", Met: "-",
		Target: fmt.Sprintf("persistence CPU per request at %s messages ≤ %.1f× at %d", long, scalingLimit, r.Settings.ThreadLen)}
	for _, w := range [][2]string{{"replace-paced", "replace-long-paced"}, {"replace", "replace-long"}} {
		rs, rl := rows[w[0]+"/chronicle-redis"], rows[w[1]+"/chronicle-redis"]
		ps, pl := rows[w[0]+"/chronicle-pass"], rows[w[1]+"/chronicle-pass"]
		if rs == nil || rl == nil || ps == nil || pl == nil || rs.CPUPer1k <= ps.CPUPer1k {
			continue
		}
		ratio := (rl.CPUPer1k - pl.CPUPer1k) / (rs.CPUPer1k - ps.CPUPer1k)
		scale.Measured = fmt.Sprintf("%.2f× (%s, chronicle-redis minus chronicle-pass)", ratio, w[0])
		scale.Met = yesNo(ratio <= scalingLimit)
		break
	}
	out = append(out, scale)

	streams := Goal{Name: "open streams (Redis)", Met: "-",
		Target: fmt.Sprintf("every stream in order, RSS < %.0f KiB per open stream", streamKBLimit)}
	for _, sc := range r.Streams {
		if sc.Target != "chronicle-redis" {
			continue
		}
		streams.Measured = fmt.Sprintf("%.1f KiB per stream, %d of %d streams whole", sc.KBPerStream, sc.OK, sc.Streams)
		streams.Met = yesNo(sc.OK == sc.Streams && sc.KBPerStream < streamKBLimit)
	}
	out = append(out, streams)

	hol := Goal{Name: "head-of-line", Met: "-",
		Target: fmt.Sprintf("small streams beside a big request: p99 first event and event gap ≤ direct's + %s", fmtDur(int64(holExcessLimit)))}
	var direct *HOLCheck
	for _, h := range r.HOL {
		if h.Target == "direct" {
			direct = h
		}
	}
	if direct != nil {
		// worstOver is the largest excess over direct's p99s among the
		// targets keep picks: by how much, on which target, and in what.
		worstOver := func(keep func(target string) bool) (worst int64, target, what string) {
			for _, h := range r.HOL {
				if !keep(h.Target) {
					continue
				}
				for _, d := range []struct {
					what string
					v    int64
				}{{"first event", h.WithTTFE99 - direct.WithTTFE99}, {"gap", h.WithGapP99 - direct.WithGapP99}} {
					if target == "" || d.v > worst {
						worst, target, what = d.v, h.Target, d.what
					}
				}
			}
			return worst, target, what
		}
		if worst, target, what := worstOver(func(t string) bool { return strings.HasPrefix(t, "chronicle-") }); target != "" {
			hol.Measured = "worst " + fmtSigned(worst) + " (" + target + " " + what + ")"
			hol.Met = yesNo(worst <= int64(holExcessLimit))
			// A baseline's own excess tells the machine's share from
			// chronicle's, as the latency goals' notes do.
			if b, target, what := worstOver(func(t string) bool { return t == "go-httputil" }); target != "" {
				hol.Note = "go-httputil " + fmtSigned(b) + " (" + what + ")"
			}
		}
	}
	out = append(out, hol)
	return out
}

// totalWorkloads are the workloads the whole cost per turn is judged in.
var totalWorkloads = []string{"chat", "stream", "replace", "append"}

// totalGoals judges what a persisted turn costs in all, the proxy and its
// store server together (issue 30): chronicle-redis plus redis-server
// against go-httputil in each of totalWorkloads, the Redis server's own
// CPU per non-stream turn, and the embedded store (in-process) against
// go-httputil's CPU and chronicle-pass's throughput.
func totalGoals(rows map[string]*Row) []Goal {
	var out []Goal
	for _, w := range totalWorkloads {
		g := Goal{Name: "total CPU, " + w + " (Redis)", Met: "-",
			Target: fmt.Sprintf("chronicle-redis + redis-server CPU per request ≤ %.1f× go-httputil's (%s)", totalCPULimit, w)}
		c, h := rows[w+"/chronicle-redis"], rows[w+"/go-httputil"]
		if c != nil && h != nil && h.CPUPer1k > 0 && c.CPUPer1k > 0 && c.StoreCPU1k > 0 {
			total := c.CPUPer1k + c.StoreCPU1k
			g.Measured = fmt.Sprintf("%.2f× (%s + %s against %s s per 1,000)", total/h.CPUPer1k, fmtCPU(c.CPUPer1k), fmtCPU(c.StoreCPU1k), fmtCPU(h.CPUPer1k))
			g.Met = yesNo(total/h.CPUPer1k <= totalCPULimit)
		}
		out = append(out, g)
	}
	turn := Goal{Name: "Redis server CPU per turn", Met: "-",
		Target: fmt.Sprintf("≤ %.0f µs per non-stream turn (chat, replace, append)", storeTurnLimit*1e6)}
	var worst float64
	var worstAt string
	for _, w := range []string{"chat", "replace", "append"} {
		if c := rows[w+"/chronicle-redis"]; c != nil && c.StoreCPU1k > 0 && c.StoreCPU1k/1000 > worst {
			worst, worstAt = c.StoreCPU1k/1000, w
		}
	}
	if worstAt != "" {
		turn.Measured = fmt.Sprintf("%.0f µs (%s), %.0f turns/s per Redis core", worst*1e6, worstAt, 1/worst)
		turn.Met = yesNo(worst <= storeTurnLimit)
	}
	out = append(out, turn)
	for _, w := range []string{"chat", "replace"} {
		g := Goal{Name: "embedded, " + w, Met: "-",
			Target: fmt.Sprintf("CPU per request ≤ %.1f× go-httputil's and requests/s ≥ %.0f%% of chronicle-pass's (%s)", embeddedCPULimit, embeddedRateLimit*100, w)}
		e, h, ps := rows[w+"/chronicle-embedded"], rows[w+"/go-httputil"], rows[w+"/chronicle-pass"]
		if e != nil && h != nil && ps != nil && h.CPUPer1k > 0 && e.CPUPer1k > 0 && ps.RPS > 0 {
			cpu, rate := e.CPUPer1k/h.CPUPer1k, e.RPS/ps.RPS
			g.Measured = fmt.Sprintf("%.2f× CPU, %.0f%% of the requests/s (%.0f against %.0f)", cpu, rate*100, e.RPS, ps.RPS)
			g.Met = yesNo(cpu <= embeddedCPULimit && rate >= embeddedRateLimit)
		}
		out = append(out, g)
	}
	return out
}

// machineTicks reads the busy and total clock ticks of all CPUs from
// /proc/stat (idle and iowait are not busy); ok is false where there is
// none.
func machineTicks() (busy, total uint64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, s := range f[1:] {
		if i >= 8 { // guest and guest_nice are already in user and nice
			break
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total, true
}

// busyShare is the share of the machine's CPU time that was busy between
// two machineTicks readings; 0 when unknown.
func busyShare(b0, t0, b1, t1 uint64) float64 {
	if t1 <= t0 || b1 < b0 {
		return 0
	}
	return float64(b1-b0) / float64(t1-t0)
}

// printGoals renders the goals table.
func printGoals(w io.Writer, goals []Goal) {
	var rows [][]string
	for _, g := range goals {
		m := g.Measured
		if m == "" {
			m = "not measured"
		}
		if g.Note != "" {
			m += " [" + g.Note + "]"
		}
		rows = append(rows, []string{g.Name, g.Met, m, g.Target})
	}
	renderTable(w, []string{"goal", "met", "measured", "target"}, rows, 4)
}

// plural counts n things: "1 phase", "14 phases".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return strconv.Itoa(n) + " " + thing + "s"
}
