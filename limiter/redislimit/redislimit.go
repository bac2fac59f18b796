// Package redislimit is the shared-mode limiter: FIFO gates and rate limits
// that every replica sharing one Redis (single node or Cluster) sees the
// same way. It implements limiter.Gates and limiter.RateLimiter and passes
// the limitertest suites.
//
// A gate is a fair semaphore with leased slots. Arrival order is a ticket
// from a counter; waiters sit in a sorted set by ticket, holders in a sorted
// set by lease expiry. A released or lapsed slot goes straight to the oldest
// ticket, whose replica is woken by pub/sub; every waiter also re-checks on
// a bounded interval, so a lost notification only delays, never strands.
// Holders and waiters are renewed by one background loop per Limiter; a
// replica that dies stops renewing and its slots lapse within one lease.
//
// Rate limits are GCRA (the arithmetic of limiter.LocalRateLimiter) in one
// atomic Lua step per decision, on one hash per key. All keys of one gate or
// one rate key share a hash tag, so each script touches one Cluster slot.
// Every script is safe to run twice (go-redis retries after timeouts):
// tokens and operation ids are random and checked inside the scripts.
package redislimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options configure a Limiter; the zero value is usable.
type Options struct {
	// Prefix starts every key and the wake-up channel; default "chr:lim".
	Prefix string
	// Lease is how long a slot (or a place in the queue) survives without
	// renewal; default 30s. A dead replica's slots free up within it.
	Lease time.Duration
	// RenewEvery is the renewal period; default Lease/3.
	RenewEvery time.Duration
	// Recheck bounds how long a waiter trusts pub/sub before asking Redis
	// again; default Lease/4, at most 1s.
	Recheck time.Duration
	// Now, when set, is the rate limiter's clock (tests); by default the
	// scripts read Redis's TIME, so replicas with skewed clocks agree.
	// Gate leases always use Redis's TIME.
	Now func() time.Time
	// Logger receives renewal and release failures; default slog.Default().
	Logger *slog.Logger
}

// Limiter is one replica's handle on the shared limits. It is safe for
// concurrent use; create one per process and Close it on shutdown.
type Limiter struct {
	rdb     redis.UniversalClient
	o       Options
	channel string
	pubsub  *redis.PubSub
	stop    chan struct{}
	wg      sync.WaitGroup
	cleanup sync.WaitGroup // clean-ups after Redis errors, run off the caller's path

	mu     sync.Mutex
	gates  map[string]*SharedGate
	tokens map[string]*entry // this replica's waiters and holders
	closed bool
}

type entry struct {
	g      *SharedGate
	notify chan struct{}
	held   bool
	slot   *slot
}

// New subscribes to the wake-up channel and starts the renewal loop.
func New(ctx context.Context, rdb redis.UniversalClient, o Options) (*Limiter, error) {
	if o.Prefix == "" {
		o.Prefix = "chr:lim"
	}
	if o.Lease <= 0 {
		o.Lease = 30 * time.Second
	}
	if o.RenewEvery <= 0 {
		o.RenewEvery = o.Lease / 3
	}
	if o.Recheck <= 0 {
		o.Recheck = min(o.Lease/4, time.Second)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	l := &Limiter{
		rdb: rdb, o: o, channel: o.Prefix + ":wake",
		stop: make(chan struct{}), gates: map[string]*SharedGate{}, tokens: map[string]*entry{},
	}
	l.pubsub = rdb.Subscribe(ctx, l.channel)
	if _, err := l.pubsub.Receive(ctx); err != nil {
		l.pubsub.Close()
		return nil, errors.Join(errors.New("redislimit: subscribe"), err)
	}
	l.wg.Add(2)
	go l.dispatch()
	go l.renewLoop()
	return l, nil
}

// Close stops the renewal loop and the subscription. It does not release
// held slots: they lapse after Lease, as a crashed replica's would; release
// slots first for a clean shutdown. Waiters still queued get ErrClosed.
func (l *Limiter) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	for _, e := range l.tokens {
		if !e.held {
			select {
			case e.notify <- struct{}{}:
			default:
			}
		}
	}
	l.mu.Unlock()
	close(l.stop)
	err := l.pubsub.Close()
	l.wg.Wait()
	l.cleanup.Wait()
	return err
}

// later runs f in the background (Close waits for it); after Closed it runs
// f at once.
func (l *Limiter) later(f func()) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		f()
		return
	}
	l.cleanup.Add(1)
	l.mu.Unlock()
	go func() {
		defer l.cleanup.Done()
		f()
	}()
}

func (l *Limiter) isClosed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// dispatch wakes local waiters named in a wake-up message.
func (l *Limiter) dispatch() {
	defer l.wg.Done()
	for msg := range l.pubsub.Channel() {
		l.mu.Lock()
		for tok := range strings.SplitSeq(msg.Payload, " ") {
			if e := l.tokens[tok]; e != nil {
				select {
				case e.notify <- struct{}{}:
				default:
				}
			}
		}
		l.mu.Unlock()
	}
}

// renewLoop extends the leases of this replica's holders and waiters.
func (l *Limiter) renewLoop() {
	defer l.wg.Done()
	t := time.NewTicker(l.o.RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.renew()
		}
	}
}

func (l *Limiter) renew() {
	byGate := map[*SharedGate][]any{}
	l.mu.Lock()
	for tok, e := range l.tokens {
		byGate[e.g] = append(byGate[e.g], tok)
	}
	l.mu.Unlock()
	if len(byGate) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.o.RenewEvery)
	defer cancel()
	type job struct {
		g   *SharedGate
		cmd *redis.Cmd
	}
	var jobs []job
	_, _ = l.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for g, toks := range byGate {
			args := append([]any{l.o.Lease.Milliseconds()}, toks...)
			jobs = append(jobs, job{g, renewScript.Eval(ctx, p, g.keys, args...)})
		}
		return nil
	})
	for _, j := range jobs {
		missing, err := j.cmd.StringSlice()
		if err != nil {
			l.o.Logger.Warn("redislimit: renew leases", "gate", j.g.name, "err", err)
			continue
		}
		for _, tok := range missing {
			l.mu.Lock()
			e := l.tokens[tok]
			if e != nil && e.held {
				// The lease lapsed (Redis unreachable for a whole lease):
				// the slot may already be someone else's.
				delete(l.tokens, tok)
				e.g.c.Lost.Add(1)
			} else if e != nil {
				select { // a waiter lost its place; let it re-queue
				case e.notify <- struct{}{}:
				default:
				}
			}
			l.mu.Unlock()
		}
	}
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// tag is the hash tag that keeps one limit's keys in one Cluster slot.
func (l *Limiter) tag(kind, name string) string {
	return "{" + l.o.Prefix + ":" + kind + ":" + name + "}"
}
