package redisstore

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
)

// batch is one caller's commands for one round trip: a pipeline whose
// scripts go as EVALSHA next to plain commands. Concurrent batches share
// round trips (see sender); on a cluster, go-redis splits a round trip by
// node and sends the parts in parallel. Open preloads every script, so
// EVALSHA normally finds it; after a server restart or SCRIPT FLUSH the
// server answers NOSCRIPT without running the script, and exec re-sends
// exactly those scripts with their bodies (EVAL, which caches them again),
// in their order, once. Commands that ran are never sent again, so a
// re-send cannot apply anything twice.
type batch struct {
	argArena
	ctx     context.Context
	pipe    redis.Pipeliner
	scripts []queuedScript
	script1 [2]queuedScript // scripts' first backing array
	cmds    []redis.Cmder   // pipe's commands, kept when exec sends them
	size    int             // bytes of the scripts' string and []byte arguments

	sent   chan struct{} // closed when a lane has sent it
	onSent func(error)   // an asynchronous batch's caller (execAsync)
	// resent: a script answered NOSCRIPT and ran again in a pipeline of
	// its own, after the rest of the batch.
	resent bool
	// wait is a finish's WAIT for a replica, queued after it (nil: none).
	wait *redis.Cmd
}

// queuedScript is a script queued as EVALSHA. Its arguments are the
// command's own (cmd.Args() past the keys), not a copy: a finish queued
// behind others in a burst holds one copy of its arguments, not two.
type queuedScript struct {
	sc    *redis.Script
	nkeys int
	cmd   *redis.Cmd
}

// keys are the script's keys as queued.
func (q *queuedScript) keys() []string {
	a := q.cmd.Args()[3 : 3+q.nkeys]
	keys := make([]string, len(a))
	for i, k := range a {
		keys[i] = argString(k)
	}
	return keys
}

// args are the script's arguments as queued: EVALSHA, the hash, the key
// count, the keys, then these.
func (q *queuedScript) args() []any { return q.cmd.Args()[3+q.nkeys:] }

// argString is a string argument as queued: a string, or a *string
// (batch.str).
func argString(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case *string:
		return *v
	}
	return ""
}

// argArena holds a step's string and integer script arguments: go-redis
// takes arguments as any, and boxing a string, or an int64 past 255, into
// an any allocates each time, while a pointer boxes without allocating
// and go-redis writes a *string or *int64 as its value. So a step's
// arguments cost one allocation, the batch's, instead of one apiece. The
// arena lives in the batch, which the commands' arguments then keep alive
// as long as they are referenced.
type argArena struct {
	strs [20]string
	ints [6]int64
	ns   int
	ni   int
}

// str returns v boxed without allocating (a *string into the arena; ""
// and, once the arena is full, v itself).
func (a *argArena) str(v string) any {
	if v == "" || a.ns == len(a.strs) {
		return v
	}
	a.strs[a.ns] = v
	a.ns++
	return &a.strs[a.ns-1]
}

// int returns v boxed without allocating (Go boxes 0-255 from a static
// table; others go into the arena).
func (a *argArena) int(v int64) any {
	if (v >= 0 && v < 256) || a.ni == len(a.ints) {
		return v
	}
	a.ints[a.ni] = v
	a.ni++
	return &a.ints[a.ni-1]
}

// scriptSHA holds each script's hash boxed once (an EVALSHA argument).
var scriptSHA = func() map[*redis.Script]any {
	m := make(map[*redis.Script]any, len(scripts)+1)
	for _, sc := range append(scripts, forkScript) {
		m[sc] = sc.Hash()
	}
	return m
}()

func (s *Store) batch(ctx context.Context) *batch {
	b := &batch{ctx: ctx, pipe: s.c.Pipeline()}
	b.scripts = b.script1[:0]
	return b
}

// evalArgs starts the argument list of an EVALSHA with room for n keys and
// arguments (see evalsha).
func evalArgs(n int) []any { return make([]any, 3, 3+n) }

// evalsha queues sc as EVALSHA with args, made by evalArgs: its first
// three places are filled here, then come the nkeys keys and the
// script's arguments. The result lands in the returned Cmd, also when
// exec had to re-send it.
func (b *batch) evalsha(sc *redis.Script, nkeys int, args []any) *redis.Cmd {
	sha, ok := scriptSHA[sc]
	if !ok {
		sha = sc.Hash()
	}
	args[0], args[1], args[2] = "evalsha", sha, nkeys
	cmd := b.pipe.Do(b.ctx, args...)
	b.scripts = append(b.scripts, queuedScript{sc, nkeys, cmd})
	for _, a := range args[3+nkeys:] {
		switch v := a.(type) {
		case string:
			b.size += len(v)
		case *string:
			b.size += len(*v)
		case []byte:
			b.size += len(v)
		}
	}
	return cmd
}

// script queues sc as EVALSHA with keys and args (evalsha for a caller
// that builds the argument list itself).
func (b *batch) script(sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	a := evalArgs(len(keys) + len(args))
	for _, k := range keys {
		a = append(a, k)
	}
	return b.evalsha(sc, len(keys), append(a, args...))
}

// sender groups the batches of concurrent callers into shared round trips,
// the way the embedded store groups commits. At most sendLanes round trips
// are in flight. A caller that finds a lane free and nobody queued sends
// its batch at once, itself: an idle store adds neither latency nor a
// hand-off. Otherwise it queues its batch and waits; when a round trip
// ends and batches are queued, its lane goes to one of sendLanes sender
// goroutines, which sends the queued batches (up to maxGroup, and
// maxGroupBytes of arguments) as one pipeline, and the next group after
// it, until none is queued: one write and one read for all of them, where
// each would otherwise pay its own syscalls and wake-ups, on the proxy and
// on the server. Under load a batch waits at most for one round trip in
// flight. Nothing runs on a timer.
//
// Queued batches are sent by goroutines of the store's own, not by one of
// their callers, because go-redis's send and read paths are deep (about
// 3 KiB of stack, 6 KiB when the pool dials) and a caller is a request's
// goroutine already deep in the proxy: one that led a group had its stack
// doubled to 32 KiB, and in a burst of 2,000 streams opening at once (all
// of them queued behind each other) the streams kept those stacks.
//
// A batch larger than bigBatch (a long transcript) goes alone, from its
// caller, and takes no lane: its transfer would hold up every batch grouped
// with it, and the lanes are kept for the small, frequent ones.
//
// A group is sent under a context that its callers' cancellations do not
// end (go-redis's read and write timeouts bound it), so one caller going
// away cannot fail the others' commands. A caller whose context ends while
// its batch is still queued leaves the queue and gets the context's error:
// its commands are then never sent.
type sender struct {
	mu      sync.Mutex
	busy    int // lanes in use: round trips in flight, or a sender goroutine's turn
	queue   []*batch
	stopped bool          // Close: nothing more is queued
	lanes   chan struct{} // a lane handed to the sender goroutines
	closed  chan struct{} // Close: the sender goroutines end
	once    sync.Once
}

const (
	sendLanes = 4
	// maxGroup is large so that a burst (a few thousand streams opening
	// at once) is sent in a few round trips: under a saturated CPU each
	// round trip's hand-over waits its turn on a P, and with groups of 64
	// the 2,000 starts of the streams check took 0.35 s on average.
	maxGroup      = 512
	maxGroupBytes = 1 << 20
	bigBatch      = 64 << 10
)

// startSenders starts the sender goroutines; Close ends them.
func (s *Store) startSenders() {
	q := &s.send
	q.lanes = make(chan struct{}, sendLanes)
	q.closed = make(chan struct{})
	for range sendLanes {
		go s.sendQueued()
	}
}

// stopSenders ends the sender goroutines once they are idle. What is
// still queued is not sent: its callers get redis.ErrClosed (the store's
// ErrUnavailable), as does a batch queued after.
func (s *Store) stopSenders() {
	q := &s.send
	q.mu.Lock()
	q.stopped = true
	left := q.queue
	q.queue = nil
	q.mu.Unlock()
	q.once.Do(func() { close(q.closed) })
	for _, w := range left {
		for _, c := range w.cmds {
			c.SetErr(redis.ErrClosed)
		}
		if w.onSent != nil {
			w.onSent(redis.ErrClosed)
		} else {
			close(w.sent)
		}
	}
}

// exec sends the batch, alone or in a group, and returns the first error
// of any of its commands other than redis.Nil (unmapped: callers read each
// command's result).
func (b *batch) exec(s *Store) error {
	b.cmds = b.pipe.Cmds()
	if b.size > bigBatch {
		b.sendGroup(s, nil)
		return b.result(s)
	}
	q := &s.send
	q.mu.Lock()
	if q.busy < sendLanes && len(q.queue) == 0 {
		q.busy++
		q.mu.Unlock()
		b.sendGroup(s, nil)
		s.passLane()
		return b.result(s)
	}
	if q.stopped {
		q.mu.Unlock()
		return redis.ErrClosed
	}
	b.sent = make(chan struct{})
	q.queue = append(q.queue, b)
	q.mu.Unlock()
	select {
	case <-b.sent:
	case <-b.ctx.Done():
		q.mu.Lock()
		for i, w := range q.queue {
			if w == b {
				q.queue = append(q.queue[:i], q.queue[i+1:]...)
				q.mu.Unlock()
				return b.ctx.Err()
			}
		}
		q.mu.Unlock()
		<-b.sent // taken into a group already: it is being sent
	}
	return b.result(s)
}

// execAsync queues the batch and returns; a sender goroutine sends it and
// calls done with what exec would have returned. A batch whose context
// ended while it was queued is not sent; after Close, done gets
// redis.ErrClosed at once. A batch larger than bigBatch goes alone, from
// a goroutine of its own.
func (b *batch) execAsync(s *Store, done func(error)) {
	b.cmds = b.pipe.Cmds()
	if b.size > bigBatch {
		go func() { done(b.exec(s)) }()
		return
	}
	b.onSent = done
	q := &s.send
	q.mu.Lock()
	if q.stopped {
		q.mu.Unlock()
		done(redis.ErrClosed)
		return
	}
	q.queue = append(q.queue, b)
	if q.busy < sendLanes {
		q.busy++
		q.lanes <- struct{}{}
	}
	q.mu.Unlock()
}

// passLane hands the lane of a round trip that just ended to the sender
// goroutines when batches are queued, or frees it.
func (s *Store) passLane() {
	q := &s.send
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 {
		q.busy--
		return
	}
	q.lanes <- struct{}{} // never blocks: at most sendLanes lanes exist
}

// sendQueued is a sender goroutine: given a lane, it sends the queued
// batches a group per round trip until none is left, then frees the lane.
func (s *Store) sendQueued() {
	q := &s.send
	for {
		select {
		case <-q.lanes:
		case <-q.closed:
			return // Close emptied the queue
		}
		for {
			q.mu.Lock()
			if len(q.queue) == 0 {
				q.busy--
				q.mu.Unlock()
				break
			}
			n, size := 1, q.queue[0].size
			for n < min(len(q.queue), maxGroup) && size+q.queue[n].size <= maxGroupBytes {
				size += q.queue[n].size
				n++
			}
			group := make([]*batch, 0, n)
			var expired []*batch
			for _, w := range q.queue[:n] {
				if w.onSent != nil && w.ctx.Err() != nil {
					expired = append(expired, w)
				} else {
					group = append(group, w)
				}
			}
			rest := copy(q.queue, q.queue[n:])
			clear(q.queue[rest:])
			q.queue = q.queue[:rest]
			q.mu.Unlock()
			for _, w := range expired {
				w.onSent(w.ctx.Err())
			}
			if len(group) > 0 {
				group[0].sendGroup(s, group)
			}
			for _, w := range group {
				if w.onSent != nil {
					w.onSent(w.result(s))
				} else {
					close(w.sent)
				}
			}
		}
	}
}

// sendGroup sends b alone (group nil, or a group of one) or the group b
// leads, in one round trip. Each command's result or error lands in its own Cmd: go-redis
// marks every command it got no reply for with the connection's error, so
// each batch reads its own outcome from its commands alone.
func (b *batch) sendGroup(s *Store, group []*batch) {
	if len(group) <= 1 {
		_, _ = b.pipe.Exec(b.ctx)
		return
	}
	pipe := s.c.Pipeline()
	for _, w := range group {
		_ = pipe.BatchProcess(w.ctx, w.cmds...)
	}
	_, _ = pipe.Exec(context.WithoutCancel(b.ctx))
}

// result reads the batch's own commands after its round trip: a connection
// failure first (no result is known), then the NOSCRIPT re-send, then the
// first command error other than redis.Nil.
func (b *batch) result(s *Store) error {
	for _, c := range b.cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) && !isRedisErr(err) {
			return err
		}
	}
	var again []queuedScript
	for _, q := range b.scripts {
		if redis.HasErrorPrefix(q.cmd.Err(), "NOSCRIPT") {
			again = append(again, q)
		}
	}
	if len(again) > 0 {
		b.resent = true
		pipe := s.c.Pipeline()
		evals := make([]*redis.Cmd, len(again))
		for i, q := range again {
			evals[i] = q.sc.Eval(b.ctx, pipe, q.keys(), q.args()...)
		}
		if _, err := pipe.Exec(b.ctx); err != nil && !errors.Is(err, redis.Nil) && !isRedisErr(err) {
			return err
		}
		for i, q := range again {
			q.cmd.SetErr(evals[i].Err())
			q.cmd.SetVal(evals[i].Val())
		}
	}
	for _, c := range b.cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}

func isRedisErr(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// preload puts every script into the server's cache (on a cluster, every
// shard's). Failures are ignored: a server that refuses SCRIPT LOAD (an
// ACL) still runs the scripts through the NOSCRIPT fallback.
func (s *Store) preload(ctx context.Context) {
	for _, sc := range scripts {
		if err := sc.Load(ctx, s.c).Err(); err != nil && !isRedisErr(err) {
			return // the server went away; the fallback covers it
		}
	}
}

// queueIndex adds the audit index writes of a thread write at now (the
// timestamp the script writes as updated) to pipe. created is true for a
// transcript write, which creates the thread: it adds the thread to the
// indexes. Otherwise only entries that exist move (ZADD XX GT), so a
// thread that never saved a transcript is not listed, and its tenant not
// added.
//
// The index commands run whatever the script decides: a refused (fenced,
// conflicting) or repeated write still moves the thread's score to now, and
// a refused first write may index a thread that has no transcript. Both are
// harmless: GT never moves an entry back, ListThreads skips a thread
// without a transcript and reads the summary (updated time included) from
// the thread's own hash, so a score ahead of it only reorders the listing
// by at most the refused attempt's time; DeleteThread removes the entries.
func (s *Store) queueIndex(ctx context.Context, pipe redis.Pipeliner, k store.Key, now int64, created bool) {
	score := float64(now)
	args := redis.ZAddArgs{GT: true, XX: !created, Members: []redis.Z{{Score: score, Member: k.Thread}}}
	pipe.ZAddArgs(ctx, s.tenantThreads(k.Tenant), args)
	args.Members = []redis.Z{{Score: score, Member: k.Tenant + "/" + k.Thread}}
	pipe.ZAddArgs(ctx, s.allThreads(), args)
	if created {
		pipe.SAdd(ctx, s.tenants(), k.Tenant)
	}
}
