// Package spool owns the local write-ahead journal that keeps a turn
// durable while the store cannot take it. Store wraps a backend: a write
// that makes a turn durable (a run's finish, an event batch) and fails
// because the backend is unreachable is appended to a checksummed journal
// on local disk instead, and reported done; a background replayer applies
// the journal to the backend in order once it is back, and a replica that
// restarts with a journal replays it first.
//
// Replaying is idempotent because the backends' writes are: a finish
// applied twice changes nothing, events already stored are skipped. Every
// entry carries its run's lease, so the backend's fencing still decides:
// a finish whose thread was taken by a newer lease in the meantime is
// refused (counted as a conflict, logged, and dropped) rather than allowed
// to overwrite newer history.
//
// While a thread has spooled writes, every read or write of that thread
// first replays the journal; if the backend is still unreachable, reads
// and run starts fail with store.ErrUnavailable (never an answer from a
// store that lacks the spooled turn), and further writes of the thread are
// spooled behind the earlier ones, so their order holds.
package spool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

// Options configure a Store.
type Options struct {
	// Dir holds the journal (created if missing).
	Dir string
	// MaxBytes caps the journal; a write that would pass it is not
	// spooled (ErrFull). 0 means 1 GiB.
	MaxBytes int64
	// Fsync syncs each record to disk before the write counts as done,
	// so a spooled turn survives a power loss too. Without it a record
	// is handed to the OS, which survives a crash of chronicle.
	Fsync bool
	// RetryMin and RetryMax bound the replayer's backoff while the
	// backend stays unreachable (defaults 100ms and 5s).
	RetryMin, RetryMax time.Duration
	// OpTimeout bounds each replayed write (default 5s).
	OpTimeout time.Duration
	Logger    *slog.Logger
}

// ErrFull: the journal is at Options.MaxBytes; the write is kept nowhere.
var ErrFull = errors.New("spool: journal full")

// Stats describe the journal, for metrics: a Store is a store.Journal.
type Stats = store.JournalStats

// Store is a store.Store that spools what its backend cannot take. Safe
// for concurrent use.
type Store struct {
	store.Store
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	j       *journal
	pending []*entry
	bytes   int64
	threads map[store.Key]int // pending entries per thread
	// offline maps a run started while the backend was unreachable
	// (StartOffline; its lease has no token) to the lease the backend
	// gave it on replay, so the run's later writes reach it fenced.
	offline map[runRef]store.Lease
	// queued is len(pending), read without the lock: the common case, an
	// empty journal, costs one atomic load per operation.
	queued atomic.Int64

	replayMu  sync.Mutex // one replay at a time
	closeOnce sync.Once
	closeErr  error
	kick      chan struct{}
	stop      chan struct{}
	done      chan struct{}

	spooled, replayed, conflicts, full, lost atomic.Int64
}

var _ store.AsyncSaver = (*Store)(nil)
var _ store.Journal = (*Store)(nil)

// Open wraps backend with the journal in o.Dir, loading what an earlier
// process left there (a torn last record is cut off and logged), and
// starts the replayer. Close stops it and closes the backend.
func Open(backend store.Store, o Options) (*Store, error) {
	if o.Dir == "" {
		return nil, errors.New("spool: no directory")
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 1 << 30
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 100 * time.Millisecond
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = 5 * time.Second
		if o.RetryMax < o.RetryMin {
			o.RetryMax = o.RetryMin
		}
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 5 * time.Second
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	j, entries, torn, err := openJournal(o.Dir, o.Fsync)
	if err != nil {
		return nil, err
	}
	s := &Store{Store: backend, opts: o, log: log, j: j, threads: map[store.Key]int{}, offline: map[runRef]store.Lease{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if torn {
		log.Warn("spool: the journal ended in a torn record (a write cut by a crash); it was cut off", "dir", o.Dir)
	}
	for _, e := range entries {
		s.pending = append(s.pending, e)
		s.bytes += e.size
		s.threads[e.Lease.Key]++
	}
	s.queued.Store(int64(len(s.pending)))
	if len(entries) > 0 {
		log.Warn("spool: replaying writes an earlier run of this replica spooled", "entries", len(entries), "dir", o.Dir)
	}
	go s.replayer()
	return s, nil
}

// Stats reports the journal's state.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	st := Stats{Entries: len(s.pending), Bytes: s.bytes}
	if len(s.pending) > 0 {
		st.Oldest = s.pending[0].At
	}
	s.mu.Unlock()
	st.Spooled, st.Replayed, st.Conflicts, st.Full, st.Lost = s.spooled.Load(), s.replayed.Load(), s.conflicts.Load(), s.full.Load(), s.lost.Load()
	return st
}

// unavailable reports whether err means the backend could not be reached
// (the write may or may not have been applied: replaying it is safe).
func unavailable(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)
}

// waiting reports whether k has spooled writes.
func (s *Store) waiting(k store.Key) bool {
	if s.queued.Load() == 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.threads[k] > 0
}

// settle replays the journal when k has spooled writes, and reports
// whether k still has some (the backend is still unreachable).
func (s *Store) settle(ctx context.Context, k store.Key) bool {
	if !s.waiting(k) {
		return false
	}
	s.replay(ctx)
	return s.waiting(k)
}

// errWaiting is what a read or a start of a thread with spooled writes
// answers while the backend stays unreachable.
func errWaiting(k store.Key) error {
	return fmt.Errorf("%w: spool: thread %s has writes waiting for the store", store.ErrUnavailable, k)
}

// add appends e to the journal and the pending list.
func (s *Store) add(e *entry) error {
	e.At = time.Now()
	rec, err := encodeRecord(e)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bytes+int64(len(rec)) > s.opts.MaxBytes {
		s.full.Add(1)
		return fmt.Errorf("%w: %d of %d bytes used", ErrFull, s.bytes, s.opts.MaxBytes)
	}
	// The pending entry is the record read back: memory of its own, as
	// the caller may reuse what it passed once the write returns.
	kept, ok := decodePayload(rec[headerSize:])
	if !ok {
		return errors.New("spool: a record does not read back")
	}
	if err := s.j.append(rec); err != nil {
		return err
	}
	kept.size = int64(len(rec))
	e = kept
	s.pending = append(s.pending, e)
	s.queued.Store(int64(len(s.pending)))
	s.bytes += e.size
	s.threads[e.Lease.Key]++
	s.spooled.Add(1)
	select {
	case s.kick <- struct{}{}:
	default:
	}
	return nil
}

type runRef struct {
	key store.Key
	run string
}

// StartOffline records the start of a run while the backend cannot be
// reached, so the run can go ahead (on_store_error: pass) and still be
// kept: the start is journalled ahead of the run's later writes and
// replayed before them. The returned lease has no fencing token; the
// spool puts the backend's lease in its place once the start is
// replayed. The thread's stored history is unknown, so the caller must
// not need it (a request that carries the whole conversation).
func (s *Store) StartOffline(ctx context.Context, r store.StartRun) (*store.Started, error) {
	if err := r.Key.Validate(); err != nil {
		return nil, err
	}
	if err := store.ValidID(r.RunID); err != nil {
		return nil, err
	}
	l := store.Lease{Key: r.Key, RunID: r.RunID, Owner: r.Owner, TTL: r.TTL, Expires: time.Now().Add(r.TTL)}
	start := r
	// A replayed start may be replayed again (a crash before the journal
	// moved on): its run id is not fresh then, and the check finds it.
	start.LoadThread, start.KnownDigest, start.FreshRunID = false, "", false
	if err := s.spool(&entry{Op: opStart, Lease: l, Start: &start}, nil); err != nil {
		return nil, err
	}
	return &store.Started{Created: true, Lease: l, Run: store.Run{ID: r.RunID, Key: r.Key, Status: store.Running, Model: r.Model}}, nil
}

// resolve puts the backend's lease in place of an offline run's
// tokenless one, once its start was replayed; it reports false for an
// offline run whose start was not (its writes must queue in the journal).
func (s *Store) resolve(l *store.Lease) bool {
	if l.Token != 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	real, ok := s.offline[runRef{l.Key, l.RunID}]
	if ok {
		*l = real
	}
	return ok
}

// Finish ends the run in the backend, or spools the finish when the
// backend cannot be reached (or the thread has writes waiting already).
//
// Finish and AppendEvents run on a stream's connection goroutine, under
// the relay, whose stack the proxy keeps within 8 KiB: their own frames
// stay small, and what only the fault path needs is in functions of its
// own.
func (s *Store) Finish(ctx context.Context, l store.Lease, f *store.Finish) error {
	offline := l.Token == 0
	if s.queued.Load() > 0 && s.settle(ctx, l.Key) || !s.resolve(&l) {
		return s.spoolFinish(&l, f, nil)
	}
	err := s.Store.Finish(ctx, l, f)
	if offline && err == nil {
		s.forget(&l)
	}
	if err == nil || !unavailable(err) {
		return err
	}
	return s.spoolFinish(&l, f, err)
}

// forget drops an offline run's lease once its finish landed.
//
//go:noinline
func (s *Store) forget(l *store.Lease) {
	s.mu.Lock()
	delete(s.offline, runRef{l.Key, l.RunID})
	s.mu.Unlock()
}

//go:noinline
func (s *Store) spoolFinish(l *store.Lease, f *store.Finish, cause error) error {
	return s.spool(&entry{Op: opFinish, Lease: *l, Finish: f}, cause)
}

// AppendEvents appends to the run's event log, or spools the batch.
func (s *Store) AppendEvents(ctx context.Context, l store.Lease, first int64, events [][]byte) error {
	if s.queued.Load() > 0 && s.settle(ctx, l.Key) || !s.resolve(&l) {
		return s.spoolEvents(&l, first, events, nil)
	}
	err := s.Store.AppendEvents(ctx, l, first, events)
	if err == nil || !unavailable(err) {
		return err
	}
	return s.spoolEvents(&l, first, events, err)
}

//go:noinline
func (s *Store) spoolEvents(l *store.Lease, first int64, events [][]byte, cause error) error {
	return s.spool(&entry{Op: opEvents, Lease: *l, First: first, Events: events}, cause)
}

// spool journals e; cause is the backend's error, if it was tried. The
// spool keeps a copy, so the caller may reuse what it passed.
func (s *Store) spool(e *entry, cause error) error {
	if err := s.add(e); err != nil {
		s.log.Error("spool: a write the store could not take cannot be spooled either", "thread", e.Lease.Key.Thread, "run", e.Lease.RunID, "err", err)
		if cause != nil {
			return errors.Join(cause, err)
		}
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	s.log.Warn("spool: the store could not take a write; it is kept in the journal until the store is back",
		"thread", e.Lease.Key.Thread, "run", e.Lease.RunID, "cause", cause)
	return nil
}

// replayer applies the journal whenever something is spooled, backing off
// while the backend stays unreachable, until Close.
func (s *Store) replayer() {
	defer close(s.done)
	wait := s.opts.RetryMin
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		case <-timer.C:
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		left := s.replay(ctx)
		cancel()
		if left == 0 {
			wait = s.opts.RetryMin
			continue // until the next kick
		}
		timer.Reset(wait)
		if wait *= 2; wait > s.opts.RetryMax {
			wait = s.opts.RetryMax
		}
	}
}

// replay applies pending writes in order until one finds the backend
// unreachable, then rewrites the journal without the applied ones. It
// returns how many are left.
func (s *Store) replay(ctx context.Context) int {
	s.replayMu.Lock()
	defer s.replayMu.Unlock()
	s.mu.Lock()
	todo := append([]*entry(nil), s.pending...)
	s.mu.Unlock()
	applied := 0
	for _, e := range todo {
		if ctx.Err() != nil {
			break
		}
		err := s.apply(ctx, e)
		if err != nil && unavailable(err) {
			break
		}
		if err != nil {
			s.conflicts.Add(1)
			if e.Op == opFinish {
				s.lost.Add(1)
			}
			s.log.Error("spool: the store refused a spooled write; it is dropped", "thread", e.Lease.Key.Thread, "run", e.Lease.RunID, "err", err)
		} else {
			s.replayed.Add(1)
		}
		applied++
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if applied == 0 {
		return len(s.pending)
	}
	for _, e := range s.pending[:applied] {
		s.bytes -= e.size
		if s.threads[e.Lease.Key]--; s.threads[e.Lease.Key] <= 0 {
			delete(s.threads, e.Lease.Key)
		}
	}
	s.pending = append(s.pending[:0:0], s.pending[applied:]...)
	s.queued.Store(int64(len(s.pending)))
	if err := s.j.rewrite(s.pending); err != nil {
		// The applied writes stay in the file: replaying them again, at
		// the next start, changes nothing.
		s.log.Error("spool: rewriting the journal failed", "err", err)
	}
	if applied > 0 {
		s.log.Info("spool: replayed spooled writes", "applied", applied, "left", len(s.pending))
	}
	return len(s.pending)
}

// apply sends one spooled write to the backend.
func (s *Store) apply(ctx context.Context, e *entry) error {
	ctx, cancel := context.WithTimeout(ctx, s.opts.OpTimeout)
	defer cancel()
	if e.Op == opStart {
		return s.applyStart(ctx, e)
	}
	l := e.Lease
	if !s.resolve(&l) {
		// The run's start was refused on replay: nothing of it can land.
		return fmt.Errorf("%w: spool: run %s started offline was not started in the store", store.ErrConflict, l.RunID)
	}
	switch e.Op {
	case opEvents:
		err := s.Store.AppendEvents(ctx, l, e.First, e.Events)
		if errors.Is(err, store.ErrFenced) || errors.Is(err, store.ErrConflict) {
			// The run ended first (its finish carried later events, or
			// it was swept): the log stays as short as it is.
			return nil
		}
		return err
	default:
		err := s.Store.Finish(ctx, l, e.Finish)
		if e.Finish.Rebuild != nil && (errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict)) {
			err = s.rebuild(ctx, l, e.Finish, err)
		}
		if err == nil || !unavailable(err) {
			s.forget(&l)
		}
		return err
	}
}

// rebuild applies a finish whose run or pending turn the store lost
// (cause: the store's refusal, not found or a transcript that does not
// fit): it starts the run again if it is gone and writes the whole
// transcript over what the thread holds, provided what it holds is a
// prefix of it. A thread that moved past the spooled turn (a newer run
// wrote it) is a conflict: the newer history stays.
func (s *Store) rebuild(ctx context.Context, l store.Lease, f *store.Finish, cause error) error {
	rb := f.Rebuild
	g := *f
	g.Rebuild = nil
	var stored []store.Hash
	start := rb.Start
	// The run may be there: the check must find it (not fresh).
	start.LoadThread, start.KnownDigest, start.FreshRunID = true, "", false
	st, err := s.Store.StartRun(ctx, start)
	switch {
	case err == nil && st.Created:
		// The run was gone: it starts again under a new lease. A parked
		// run it resumed may be gone too.
		l, stored, g.Resumes = st.Lease, st.Thread.Hashes, ""
	case err == nil || errors.Is(err, store.ErrLeaseHeld):
		// The run is there (its own lease may hold the thread): only
		// the transcript did not fit.
		th, lerr := s.Store.LoadThread(ctx, l.Key)
		if lerr != nil && !errors.Is(lerr, store.ErrNotFound) {
			return lerr
		}
		stored = th.Hashes
		if errors.Is(cause, store.ErrNotFound) {
			g.Resumes = "" // the parked run it resumed is the one gone
		}
	default:
		return err
	}
	if store.CommonPrefix(stored, rb.Transcript.Hashes) != len(stored) {
		if err == nil && st.Created {
			// The restarted run must not stay running.
			_ = s.Store.Finish(ctx, l, &store.Finish{Status: store.Failed, Reason: "store_lost"})
		}
		return fmt.Errorf("%w: spool: thread %s moved past the spooled turn of run %s (%v)", store.ErrConflict, l.Key, l.RunID, cause)
	}
	tr := store.Diff(stored, rb.Transcript.Messages, rb.Transcript.Hashes)
	tr.System, tr.Connection, tr.Format, tr.Model = rb.Transcript.System, rb.Transcript.Connection, rb.Transcript.Format, rb.Transcript.Model
	g.Transcript = &tr
	if err := s.Store.Finish(ctx, l, &g); err != nil {
		return err
	}
	s.log.Warn("spool: the store had lost what a spooled finish builds on; the turn was written whole", "thread", l.Key.Thread, "run", l.RunID, "cause", cause)
	return nil
}

// errBusy: a replayed start found its thread's lease held; the journal
// waits (it is replayed in order) and tries again.
var errBusy = fmt.Errorf("%w: spool: the thread of a replayed start is busy", store.ErrUnavailable)

// applyStart replays the start of an offline run and keeps the lease the
// backend gave it. A start replayed twice finds its run and takes its
// lease from the record.
func (s *Store) applyStart(ctx context.Context, e *entry) error {
	start := *e.Start
	start.FreshRunID = false // see StartOffline
	st, err := s.Store.StartRun(ctx, start)
	switch {
	case errors.Is(err, store.ErrLeaseHeld):
		return errBusy
	case err != nil:
		return err
	}
	l := st.Lease
	if !st.Created {
		l = store.Lease{Key: e.Lease.Key, RunID: e.Lease.RunID, Owner: st.Run.LeaseOwner, Token: st.Run.LeaseToken,
			TTL: e.Lease.TTL, Expires: st.Run.LeaseExpires}
	}
	s.mu.Lock()
	s.offline[runRef{e.Lease.Key, e.Lease.RunID}] = l
	s.mu.Unlock()
	return nil
}

// Flush replays the journal now and reports how many writes are left.
func (s *Store) Flush(ctx context.Context) int { return s.replay(ctx) }

// Close stops the replayer, closes the journal (what is left in it is
// replayed at the next Open) and the backend.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.replayMu.Lock()
		s.mu.Lock()
		jerr := s.j.close()
		s.mu.Unlock()
		s.replayMu.Unlock()
		s.closeErr = errors.Join(s.Store.Close(), jerr)
	})
	return s.closeErr
}

// DebugKeys lists the backend's keys, when it can (storetest.KeyLister).
func (s *Store) DebugKeys(ctx context.Context) ([]string, error) {
	if kl, ok := s.Store.(interface {
		DebugKeys(context.Context) ([]string, error)
	}); ok {
		return kl.DebugKeys(ctx)
	}
	return nil, errors.New("spool: the backend cannot list its keys")
}

// The reads and starts of a thread with spooled writes replay them first.

func (s *Store) StartRun(ctx context.Context, r store.StartRun) (*store.Started, error) {
	if s.settle(ctx, r.Key) {
		return nil, errWaiting(r.Key)
	}
	return s.Store.StartRun(ctx, r)
}

func (s *Store) LoadThread(ctx context.Context, k store.Key) (store.Thread, error) {
	if s.settle(ctx, k) {
		return store.Thread{}, errWaiting(k)
	}
	return s.Store.LoadThread(ctx, k)
}

// ForkThread forks the parent once its spooled writes are in the store:
// a fork of a parent whose last turn waits in the journal would miss it.
func (s *Store) ForkThread(ctx context.Context, f store.Fork) (store.Thread, error) {
	if s.settle(ctx, f.From) {
		return store.Thread{}, errWaiting(f.From)
	}
	return s.Store.ForkThread(ctx, f)
}

func (s *Store) GetRun(ctx context.Context, k store.Key, runID string) (store.Run, error) {
	if s.settle(ctx, k) {
		return store.Run{}, errWaiting(k)
	}
	return s.Store.GetRun(ctx, k, runID)
}

func (s *Store) ListRuns(ctx context.Context, k store.Key) ([]store.Run, error) {
	if s.settle(ctx, k) {
		return nil, errWaiting(k)
	}
	return s.Store.ListRuns(ctx, k)
}

func (s *Store) DeleteThread(ctx context.Context, k store.Key) error {
	if s.settle(ctx, k) {
		return errWaiting(k)
	}
	return s.Store.DeleteThread(ctx, k)
}

func (s *Store) SaveTranscript(ctx context.Context, l store.Lease, t store.Transcript) error {
	if s.settle(ctx, l.Key) || !s.resolve(&l) {
		return errWaiting(l.Key)
	}
	return s.Store.SaveTranscript(ctx, l, t)
}

// Renew renews the lease; an offline run's, once its start was replayed.
// Until then there is nothing to renew, and it succeeds.
func (s *Store) Renew(ctx context.Context, l store.Lease, p store.RunPatch) (store.Renewal, error) {
	if !s.resolve(&l) {
		return store.Renewal{Lease: l}, nil
	}
	return s.Store.Renew(ctx, l, p)
}

// Release gives an offline run's lease up once it has one.
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	if !s.resolve(&l) {
		return nil
	}
	return s.Store.Release(ctx, l)
}

// SaveTranscriptAsync queues the write on the backend when it can, else
// writes it on a goroutine (see store.AsyncSaver).
func (s *Store) SaveTranscriptAsync(ctx context.Context, l store.Lease, t store.Transcript, done func(error)) {
	if s.waiting(l.Key) || l.Token == 0 {
		go func() { done(s.SaveTranscript(ctx, l, t)) }()
		return
	}
	if as, ok := s.Store.(store.AsyncSaver); ok {
		as.SaveTranscriptAsync(ctx, l, t, done)
		return
	}
	go func() { done(s.Store.SaveTranscript(ctx, l, t)) }()
}

// Sweep replays the journal first, so that no spooled run is taken for a
// run lost with its replica: its replica is alive and holds its finish.
// While writes wait, nothing is swept.
func (s *Store) Sweep(ctx context.Context) ([]store.RunRef, error) {
	if s.Stats().Entries > 0 && s.replay(ctx) > 0 {
		return nil, fmt.Errorf("%w: spool: writes wait for the store; not sweeping", store.ErrUnavailable)
	}
	return s.Store.Sweep(ctx)
}

// Durability is the backend's guarantee plus the journal's.
func (s *Store) Durability(ctx context.Context) (string, error) {
	d := "backend: no report"
	if b, ok := s.Store.(store.Durability); ok {
		var err error
		if d, err = b.Durability(ctx); err != nil {
			return "", err
		}
	}
	sync := "each record fsynced"
	if !s.opts.Fsync {
		sync = "records handed to the OS, not fsynced"
	}
	return d + "; spool on (" + sync + "): a turn Redis cannot take is kept in " + s.opts.Dir + " until it can", nil
}

// Unwrap returns the backend (store.Unwrapper).
func (s *Store) Unwrap() store.Store { return s.Store }
