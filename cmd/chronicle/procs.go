package main

import (
	"log/slog"
	"os"
	"runtime"
)

// pickProcs returns the GOMAXPROCS chronicle runs with and why, from the
// configured procs (0: pick), Go's current choice, the CPUs the process may
// run on (its affinity mask) and whether $GOMAXPROCS is set.
//
// The one change to Go's choice: a process allowed on a single CPU gets two
// Ps. With one P the scheduler polls the network only when it runs out of
// goroutines or when sysmon does (after 10 ms), and Gosched does not poll
// it. A request that is busy for milliseconds on a large body (validation,
// hashing, copies: about 30 ms for 10 MB) then holds back every other
// connection's bytes for up to that long per wake-up. With a second P the
// woken network poller runs on its own thread, which the kernel schedules
// beside the busy one at once. A cgroup limit of one CPU on a larger
// machine keeps one P: the runtime reads that limit, and a second thread
// would be throttled rather than interleaved.
func pickProcs(configured, current, cpus int, envSet bool) (int, string) {
	switch {
	case configured > 0:
		return configured, "config procs"
	case envSet:
		return current, "$GOMAXPROCS"
	case current == 1 && cpus == 1:
		return 2, "one CPU: a second P keeps a busy request from holding back other connections"
	default:
		return current, "Go's default"
	}
}

// setProcs applies pickProcs to this process.
func setProcs(configured int, log *slog.Logger) {
	_, envSet := os.LookupEnv("GOMAXPROCS")
	current := runtime.GOMAXPROCS(0)
	n, why := pickProcs(configured, current, runtime.NumCPU(), envSet)
	if n != current {
		runtime.GOMAXPROCS(n)
	}
	log.Info("scheduler", "procs", n, "cpus", runtime.NumCPU(), "reason", why)
}
