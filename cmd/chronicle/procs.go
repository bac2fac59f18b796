package main

import (
	"log/slog"
	"os"
	"runtime"
)

// procsChoice is how many Ps chronicle runs with: base always, and boost
// (when above base) while a large request is in flight.
type procsChoice struct {
	base, boost int
	why         string
}

// pickProcs chooses GOMAXPROCS from the configured procs (0: pick), Go's
// current choice, the CPUs the process may run on (its affinity mask) and
// whether $GOMAXPROCS is set.
//
// The one change to Go's choice: a process allowed on a single CPU runs
// with one P, and with three while a request with a large body is in
// flight (proxy.Options.LargeRequestProcs). With one P the scheduler polls
// the network only when it runs out of goroutines or when sysmon does
// (after 10 ms), and Gosched does not poll it: a request busy for
// milliseconds on a large body (validation, hashing, copies: tens of ms
// for 10 MB) would hold back every other connection's bytes that long.
// The embedded store's flushes and compactions take the extra Ps too
// (embedded.Options.Background, proxy.Server.HoldProcs): on one P they
// put +50 to +130 ms on a chat turn's p99 at 1,000 turns/s, +5 to +9 ms
// with the hold.
// With more Ps an idle P's thread waits in the network poller, and the
// kernel schedules it beside the busy one at once. Three, not two: during
// a GC mark phase the fractional mark worker holds one P and the large
// request another. The extra Ps are not kept all the time because on one
// CPU they cost about a tenth more CPU per small request (idle Ps'
// threads woken to spin, and put back to sleep). A cgroup limit of one
// CPU on a larger machine keeps one P: the runtime reads that limit, and
// more threads would be throttled rather than interleaved.
func pickProcs(configured, current, cpus int, envSet bool) procsChoice {
	switch {
	case configured > 0:
		return procsChoice{configured, configured, "config procs"}
	case envSet:
		return procsChoice{current, current, "$GOMAXPROCS"}
	case current == 1 && cpus == 1:
		return procsChoice{1, 3, "one CPU: more Ps while a large request is in flight, so it does not hold back other connections"}
	default:
		return procsChoice{current, current, "Go's default"}
	}
}

// setProcs applies pickProcs to this process and returns the choice.
func setProcs(configured int, log *slog.Logger) procsChoice {
	_, envSet := os.LookupEnv("GOMAXPROCS")
	current := runtime.GOMAXPROCS(0)
	c := pickProcs(configured, current, runtime.NumCPU(), envSet)
	if c.base != current {
		runtime.GOMAXPROCS(c.base)
	}
	log.Info("scheduler", "procs", c.base, "procs_large", c.boost, "cpus", runtime.NumCPU(), "reason", c.why)
	return c
}
