package embedded

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// op is one write. fn runs inside a shared read-write transaction; it must
// check everything before it writes, report refusals through its own
// captured result (returning nil), and return an error only for failures of
// the database itself. It may run more than once.
type op struct {
	fn   func(tx *Tx) error
	done chan error
}

// maxGroup bounds how many writes share one transaction (one log write).
const maxGroup = 128

// committer is a group commit loop: writers that arrive while a commit
// is under way share the next one, and so do the writers that were about
// to arrive when the first of a group woke the committer.
//
// That second part is the yield before a commit. A writer's send makes
// the committer the next goroutine its P runs, ahead of every goroutine
// that is runnable already: on one core (a pinned proxy, GOMAXPROCS=1)
// the committer then took each write alone, 1.03 writes a commit in
// chronicle-bench's chat workload (32 connections), and every write paid
// a commit of its own: the log's write(2), the wake-ups of pebble's log
// writer and of the committer, and the scheduler's trips through idle.
// runtime.Gosched puts the committer behind what is runnable, so the
// requests being handled reach their own writes first (a turn's start or
// finish is a few microseconds of work away) and join the group: 8.3
// writes a commit in the same workload, and BenchmarkConcurrentTurns
// (-cpu 1) goes from 1.04 to 29.5. An idle store pays one pass through
// the scheduler (nothing else is runnable); a busy one trades each
// write's own commit for at most one round of the goroutines that were
// ready to run.
func (s *Store) committer() {
	defer close(s.stopped)
	group := make([]op, 0, maxGroup)
	for {
		var first op
		select {
		case first = <-s.ops:
		case <-s.stop:
			return
		}
		group = s.drain(append(group[:0], first))
		if len(group) < maxGroup {
			runtime.Gosched()
			group = s.drain(group)
		}
		s.commits.Add(1)
		s.grouped.Add(int64(len(group)))
		err := s.write(group)
		if err == nil || len(group) == 1 {
			for _, o := range group {
				o.done <- err
			}
			continue
		}
		// One write failed the shared transaction: run each alone so only
		// the failing one sees its error.
		for _, o := range group[:len(group):len(group)] {
			o.done <- s.write([]op{o})
		}
	}
}

// drain appends the writes waiting to group, up to maxGroup.
func (s *Store) drain(group []op) []op {
	for len(group) < maxGroup {
		select {
		case o := <-s.ops:
			group = append(group, o)
		default:
			return group
		}
	}
	return group
}

// write runs ops in one indexed batch and commits it: all of them or none.
// Under FsyncAlways the commit waits for the log's fsync; otherwise for
// its write(2) (walFS).
func (s *Store) write(ops []op) error {
	if p := s.broken.Load(); p != nil {
		return fmt.Errorf("the write-ahead log could not be synced: %w", *p)
	}
	b := s.db.NewIndexedBatch()
	defer b.Close()
	sc := &s.scratch
	tx := &sc.tx
	*tx = Tx{r: b, w: b, hot: s.hot, arena: sc.arena[:0], slab: sc.slab[:0], fills: sc.fills,
		vals: sc.vals[:0], markers: sc.markers[:0], markerMap: sc.marked, closers: sc.closers[:0]}
	defer sc.keep(tx)
	var err error
	for _, o := range ops {
		if err = o.fn(tx); err != nil {
			break
		}
	}
	// A failed read looks absent to an op: its error wins, so nothing an
	// op wrote on that belief commits.
	if eerr := tx.end(); eerr != nil {
		err = eerr
	}
	if err != nil {
		return err
	}
	if !b.Empty() {
		s.written.Add(int64(b.Len()))
		s.keys.Add(int64(b.Count()))
		if err := b.Commit(pebble.Sync); err != nil {
			return err
		}
	}
	s.hot.fill(tx.fills)
	return nil
}

var errClosed = errors.New("embedded store closed")

// donePool holds the answer channels of writes that got their answer.
var donePool sync.Pool

// update runs fn in the next group commit and waits for its result.
func (s *Store) update(fn func(tx *Tx) error) error {
	done, _ := donePool.Get().(chan error)
	if done == nil {
		done = make(chan error, 1)
	}
	o := op{fn: fn, done: done}
	select {
	case s.ops <- o:
	case <-s.stop:
		return unavailable(errClosed)
	}
	var err error
	select {
	case err = <-o.done:
		// Answered once, and now empty: the next write may use it.
		donePool.Put(done)
	case <-s.stopped:
		// The loop answers every op it took before it stops: an answer
		// here is whether this one committed.
		select {
		case err = <-o.done:
		default:
			return unavailable(errClosed)
		}
	}
	if err != nil {
		return unavailable(err)
	}
	return nil
}

// scratch is what the committer's transactions reuse, one after another:
// the arena of their keys, the slab of their buckets and the map of their
// fills. Nothing outlives a transaction that points into them: pebble
// copies the keys a batch is given, its iterators are closed when the
// transaction ends, and the hot cache takes the fills' strings and
// values, not the map.
type scratch struct {
	tx      Tx
	closers []io.Closer
	arena   []byte
	slab    []Bucket
	fills   map[string]*hotVal
	vals    []hotVal
	markers []marker
	marked  map[string]bool // markerMap
}

// The most a transaction's scratch keeps for the next: a chat turn's
// steps use a few dozen of each, and a group of them (the committer's
// yield, commit.go) a few dozen times that.
const (
	maxKeptArena   = 1 << 20
	maxKeptScratch = 512
	maxKeptFills   = 1024
)

// reuse clears s whole (up to its capacity: nothing it pointed to stays
// reachable) and returns it empty for the next transaction, or nil when
// it grew past maxKeptScratch.
func reuse[T any](s []T) []T {
	if cap(s) > maxKeptScratch {
		return nil
	}
	s = s[:cap(s)]
	clear(s)
	return s[:0]
}

// reuseMap is reuse of a map, kept up to maxKeptFills entries.
func reuseMap[V any](m map[string]V) map[string]V {
	if m == nil || len(m) > maxKeptFills {
		return nil
	}
	clear(m)
	return m
}

// keep takes back what tx used, once it is over. What a large
// transaction grew (a rewrite of a long thread, a sweep after a restart)
// is dropped rather than kept: clearing a slice or a map costs the room
// it once grew to, on every commit after.
func (sc *scratch) keep(tx *Tx) {
	sc.arena = tx.arena[:0]
	if cap(sc.arena) > maxKeptArena {
		sc.arena = nil
	}
	sc.closers = reuse(tx.closers) // end closed them
	sc.slab = reuse(tx.slab)       // no pointer to this transaction stays
	sc.vals = reuse(tx.vals)
	sc.markers = reuse(tx.markers)
	sc.fills = reuseMap(tx.fills)
	sc.marked = reuseMap(tx.markerMap)
	*tx = Tx{} // no pointer to this batch stays
}
