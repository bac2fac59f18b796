// Package sched holds the mechanics that bend Go's runtime for the proxy:
// where a goroutine's stack grows, how many Ps the scheduler has, and which
// buffer a large request body is read into. Each is here, not spread
// through the request pipeline, and each is guarded by the test or
// benchmark that justifies it; a mechanic whose guard shows no gain is
// removed, not kept "just in case".
//
//   - Starters runs a deep call on a kept goroutine, so the caller's stack
//     stays small. The pipeline starts every stored turn (compose, repair,
//     StartRun's round trip: 9 to 11 KiB deep) on one, because a stream's
//     connection goroutine parks for the stream's whole life with the
//     stack its request grew to: 8 KiB rather than 16 per open stream.
//     Guard: proxy's TestConnectionStackStaysSmall (every wire format, on
//     every store, under a 16 KiB stack limit) and
//     BenchmarkOpenStreamMemory (grown-stack-B/stream).
//   - ProcBoost raises GOMAXPROCS while a large request (1 MiB and up) is
//     in flight, for a process that runs on one CPU: one P is cheapest for
//     small requests, but with one P a 10 MB turn's tens of milliseconds
//     of work hold every other connection's bytes back. Guard: the
//     head-of-line check of cmd/chronicle-bench (small streams' first
//     event p99 beside back-to-back 10 MB requests: 43–54 ms with one P,
//     19–26 ms with the boost, docs/bench/design-history.md, "One CPU").
//   - BodyPool lends large request bodies a buffer of their own before
//     fasthttp reads them, instead of fasthttp's fresh power-of-two buffer
//     per large body. Guard: proxy's TestLargeBodyBuffersLent, and
//     BenchmarkPersistedLargeMessage's allocations (a 10 MB turn: 13.6 MB
//     instead of 27.5).
//
// The fourth mechanic cannot live here: functions on the path of a
// stream's finish are kept out of line (//go:noinline) so that no frame on
// the connection goroutine holds what a callee needs only briefly. Each
// such annotation in proxy says so in one line; the same stack test
// guards them.
package sched
