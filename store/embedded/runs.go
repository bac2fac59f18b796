package embedded

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/chronicle-proxy/chronicle/store"
)

// runIn returns the thread's bucket and the run; nil for either that does
// not exist.
func runIn(tx *Tx, k store.Key, id string) (*Bucket, *runRec, error) {
	tb := threadBucket(tx, k)
	if tb == nil {
		return nil, nil, nil
	}
	r, err := getRun(tb, id)
	return tb, r, err
}

// interrupts returns the interrupts each run raised.
func interrupts(tb *Bucket) (map[string][]store.Interrupt, error) {
	out := map[string][]store.Interrupt{}
	err := tb.Bucket(bIntr).ForEach(func(k, v []byte) error {
		var r intrRec
		if err := json.Unmarshal(v, &r); err != nil {
			return err
		}
		out[r.Run] = append(out[r.Run], store.Interrupt{CallID: string(k), Name: r.Name, Status: r.Status, RunID: r.Run})
		return nil
	})
	return out, err
}

func (s *Store) runView(tb *Bucket, k store.Key, id string, r *runRec) (store.Run, error) {
	run := r.toRun(k, id)
	in, err := interrupts(tb)
	if err != nil {
		return run, err
	}
	if l := in[id]; l != nil {
		run.Interrupts = l
	}
	return run, nil
}

// markLost fails a running run whose replica died, releasing its lease.
func (s *Store) markLost(tx *Tx, tb *Bucket, k store.Key, m *threadMeta, id string, now int64) (bool, error) {
	r, err := getRun(tb, id)
	if err != nil {
		return false, err
	}
	if m.LeaseRun == id {
		m.LeaseRun, m.LeaseOwner, m.LeaseToken, m.LeaseExp = "", "", 0, 0
	}
	if err := tx.Bucket(bActive).deleteOnce(tx.runKey(k, id)); err != nil {
		return false, err
	}
	if r == nil || r.Status != store.Running {
		return false, nil
	}
	r.Status, r.Reason, r.Finished = store.Failed, store.ReasonProxyLost, now
	if r.N == m.Runs {
		m.LastStatus = store.Failed
	}
	if err := s.expireEvents(tx, k, id, r, now); err != nil {
		return false, err
	}
	return true, putRun(tb, id, r)
}

// expireEvents has Sweep drop the ended run's event log after the
// retention. A run that logged no event has no log to drop and gets no
// entry (one key fewer a turn, each an insert in the memtable), as Redis
// sets no expiry on a log key that does not exist.
func (s *Store) expireEvents(tx *Tx, k store.Key, id string, r *runRec, now int64) error {
	if r.Events == 0 {
		return nil
	}
	r.EvExp = now + s.opts.EventRetention.Milliseconds()
	rk := tx.runKey(k, id)
	key := binary.BigEndian.AppendUint64(tx.alloc(8+len(rk)), uint64(r.EvExp))
	return tx.Bucket(bEvExp).Put(append(key, rk...), nil)
}

// StartRun takes the lease and creates the run, or returns the existing one.
func (s *Store) StartRun(ctx context.Context, sr store.StartRun) (*store.Started, error) {
	k := sr.Key
	if err := k.Validate(); err != nil {
		return nil, err
	}
	if err := store.ValidID(sr.RunID); err != nil {
		return nil, err
	}
	if sr.TTL <= 0 {
		return nil, fmt.Errorf("%w: lease ttl %v", store.ErrInvalid, sr.TTL)
	}
	if sr.Subject != "" {
		if err := store.ValidSubject(sr.Subject); err != nil {
			return nil, err
		}
	}
	res := new(store.Started)
	var refused error
	var lost string
	err := s.update(func(tx *Tx) error {
		*res, refused, lost = store.Started{}, nil, ""
		rid := []byte(k.Tenant + "\x00" + sr.RunID)
		// A fresh id (store.StartRun.FreshRunID) names no run: the two
		// reads that would find one are skipped (each a seek of an absent
		// key through the memtable and the tables' filters).
		if !sr.FreshRunID {
			if done, err := s.startedBefore(tx, sr, rid, res, &refused); done || err != nil {
				return err
			}
		}
		tb, err := createThreadBucket(tx, k)
		if err != nil {
			return err
		}
		m, err := loadMeta(tb)
		if err != nil {
			return err
		}
		now := s.now()
		if m.LeaseRun != "" {
			if m.LeaseExp > now {
				res.Lease = store.Lease{Key: k, RunID: m.LeaseRun, Owner: m.LeaseOwner, Token: m.LeaseToken, Expires: fromMS(m.LeaseExp)}
				refused = fmt.Errorf("thread %s busy with run %s: %w", k, m.LeaseRun, store.ErrLeaseHeld)
				return nil
			}
			lostRun := m.LeaseRun
			ok, err := s.markLost(tx, tb, k, &m, lostRun, now)
			if err != nil {
				return err
			}
			if ok {
				lost = lostRun
			}
		}
		m.LeaseSeq++
		m.Runs++
		exp := now + sr.TTL.Milliseconds()
		m.LeaseRun, m.LeaseOwner, m.LeaseToken, m.LeaseExp = sr.RunID, sr.Owner, m.LeaseSeq, exp
		m.LastStatus = store.Running
		r := &runRec{N: m.Runs, Status: store.Running, Model: sr.Model, Started: now, LeaseOwner: sr.Owner,
			LeaseToken: m.LeaseSeq, LeaseExp: exp, Fingerprint: sr.Fingerprint}
		*res = store.Started{Run: r.toRun(k, sr.RunID), Created: true,
			Lease: store.Lease{Key: k, RunID: sr.RunID, Owner: sr.Owner, Token: m.LeaseSeq, TTL: sr.TTL, Expires: fromMS(exp)}}
		// Before the meta is written: reading the thread may record its
		// digest in it.
		if err := s.withThread(tx, sr, res, &m); err != nil {
			return err
		}
		if err := putNewRun(tb, sr.RunID, r); err != nil {
			return err
		}
		if err := putMeta(tb, &m); err != nil {
			return err
		}
		if err := tx.Bucket(bRunIDs).Put(rid, []byte(k.Thread)); err != nil {
			return err
		}
		// Set once, here, where the run is made (the run ids bucket holds
		// no other run of that id), and removed once (deleteOnce).
		if err := tx.Bucket(bActive).Put(tx.runKey(k, sr.RunID), nil); err != nil {
			return err
		}
		return addSubject(tx, tb, k, sr.Subject)
	})
	if lost != "" {
		s.notify(runKey(k, lost))
	}
	if err != nil {
		return nil, err
	}
	if res.ThreadFound {
		// Large messages are read once the writer is free. Only a delete
		// of the thread can remove their files in between.
		err := s.loadAll(res.Thread.Messages)
		if errors.Is(err, errBlobGone) {
			res.Thread, err = s.LoadThread(ctx, k)
		}
		if err != nil {
			// The caller gets no lease: give it up now rather than leave
			// the thread busy until it expires (Sweep then fails the run).
			if res.Created {
				_ = s.Release(ctx, res.Lease)
			}
			return nil, err
		}
	}
	if refused != nil && !errors.Is(refused, store.ErrLeaseHeld) {
		return nil, refused
	}
	return res, refused
}

// startedBefore answers a start whose run id is taken: by a run of
// another thread or one reused with another request (refused), or by the
// run itself, returned as it is (done).
func (s *Store) startedBefore(tx *Tx, sr store.StartRun, rid []byte, res *store.Started, refused *error) (done bool, err error) {
	k := sr.Key
	if th := tx.Bucket(bRunIDs).Get(rid); th != nil && string(th) != k.Thread {
		*refused = fmt.Errorf("run %s belongs to another thread: %w", sr.RunID, store.ErrConflict)
		return true, nil
	}
	tb := threadBucket(tx, k)
	if tb == nil {
		return false, nil
	}
	r, err := getRun(tb, sr.RunID)
	if err != nil || r == nil {
		return false, err
	}
	if r.Fingerprint != sr.Fingerprint {
		*refused = fmt.Errorf("run %s reused with another request: %w", sr.RunID, store.ErrConflict)
		return true, nil
	}
	own(r) // the caller's, not the hot cache's
	if res.Run, err = s.runView(tb, k, sr.RunID, r); err != nil {
		return true, err
	}
	return true, s.withThread(tx, sr, res, nil)
}

// withThread reads the thread into res when the start asked for it, in the
// start's own transaction. m is the thread's meta as the start decoded it,
// which the start writes after this: when it does not record the
// transcript's digest for its version, the digest read here is recorded
// in it (the messages it is read from are this step's, and every later
// transcript write moves the version). nil: read the meta, record
// nothing.
func (s *Store) withThread(tx *Tx, sr store.StartRun, res *store.Started, m *threadMeta) error {
	if !sr.LoadThread {
		return nil
	}
	record := m != nil
	if m == nil {
		tb := threadBucket(tx, sr.Key)
		if tb == nil {
			return nil
		}
		mm, err := loadMeta(tb)
		if err != nil {
			return err
		}
		m = &mm
	}
	var err error
	if sr.KnownDigest != "" {
		if res.Thread, res.ThreadFound, err = readThreadMeta(tx, sr.Key, m, !sr.NoSystem); err != nil || !res.ThreadFound {
			return err
		}
		if transcriptDigest(threadBucket(tx, sr.Key), m, record) == sr.KnownDigest {
			res.Unchanged = true
			return nil
		}
	}
	res.Thread, res.ThreadFound, err = readThread(tx, sr.Key, m, !sr.NoSystem)
	if err == nil && res.ThreadFound && record {
		if _, ok := m.digest(); !ok {
			m.setDigest(store.Digest(res.Thread.Hashes))
		}
	}
	return err
}

// leased loads the thread bucket, meta and run for a fenced write.
func leased(tx *Tx, l store.Lease) (*Bucket, threadMeta, *runRec, error, error) {
	tb := threadBucket(tx, l.Key)
	if tb == nil {
		return nil, threadMeta{}, nil, nil, fmt.Errorf("thread %s: %w", l.Key, store.ErrFenced)
	}
	m, err := loadMeta(tb)
	if err != nil {
		return nil, m, nil, err, nil
	}
	if refused := fence(&m, l); refused != nil {
		return nil, m, nil, nil, refused
	}
	r, err := getRun(tb, l.RunID)
	if err != nil {
		return nil, m, nil, err, nil
	}
	if r == nil || r.Status != store.Running {
		return nil, m, nil, nil, fmt.Errorf("run %s not running: %w", l.RunID, store.ErrFenced)
	}
	return tb, m, r, nil, nil
}

// Renew extends the lease and applies the patch.
func (s *Store) Renew(ctx context.Context, l store.Lease, p store.RunPatch) (store.Renewal, error) {
	if l.TTL <= 0 {
		return store.Renewal{}, fmt.Errorf("%w: lease ttl %v", store.ErrInvalid, l.TTL)
	}
	var res store.Renewal
	var refused error
	err := s.update(func(tx *Tx) error {
		tb, m, r, err, ref := leased(tx, l)
		if refused = ref; err != nil || ref != nil {
			return err
		}
		exp := s.now() + l.TTL.Milliseconds()
		m.LeaseExp, r.LeaseExp = exp, exp
		if p.Partial != nil {
			r.Partial = p.Partial
		}
		if !p.DetachedSince.IsZero() {
			r.Detached = ms(p.DetachedSince)
		}
		if err := putMeta(tb, &m); err != nil {
			return err
		}
		res = store.Renewal{Lease: l, CancelRequested: r.Cancel}
		res.Lease.Expires = fromMS(exp)
		return putRun(tb, l.RunID, r)
	})
	if err != nil {
		return store.Renewal{}, err
	}
	return res, refused
}

// Release gives the lease up; the run stays as it is (Sweep fails it if it
// is still running).
func (s *Store) Release(ctx context.Context, l store.Lease) error {
	return s.update(func(tx *Tx) error {
		tb := threadBucket(tx, l.Key)
		if tb == nil {
			return nil
		}
		m, err := loadMeta(tb)
		if err != nil || fence(&m, l) != nil {
			return err
		}
		m.LeaseRun, m.LeaseOwner, m.LeaseToken, m.LeaseExp = "", "", 0, 0
		return putMeta(tb, &m)
	})
}

// Finish writes the transcript and ends the run in one transaction.
func (s *Store) Finish(ctx context.Context, l store.Lease, f *store.Finish) error {
	if err := store.CheckFinish(f); err != nil {
		return err
	}
	w := s.blobWrite()
	tr, err := w.transcript(f.Transcript)
	resp, up := f.Response, f.UpstreamBody
	if err == nil {
		resp, err = w.put(resp)
	}
	if err == nil {
		up, err = w.put(up)
	}
	if err == nil {
		err = w.sync()
	}
	if err != nil {
		w.end(err)
		return err
	}
	thread := threadID(l.Key)
	var refused error
	err = s.update(func(tx *Tx) error {
		refused = nil
		w.begin()
		tb := threadBucket(tx, l.Key)
		if tb == nil {
			refused = fmt.Errorf("thread %s: %w", l.Key, store.ErrFenced)
			return nil
		}
		r, err := getRun(tb, l.RunID)
		if err != nil {
			return err
		}
		if r == nil {
			refused = fmt.Errorf("run %s: %w", l.RunID, store.ErrNotFound)
			return nil
		}
		m, err := loadMeta(tb)
		if err != nil {
			return err
		}
		if r.Status != store.Running && !revivable(r, &m, l) {
			refused = finishedAgain(r.Status, r.Reason, r.LeaseToken, l, f.Status)
			return nil
		}
		if r.Status == store.Running {
			if refused = fence(&m, l); refused != nil {
				return nil
			}
		}
		var prev *runRec
		if f.Resumes != "" {
			if prev, err = getRun(tb, f.Resumes); err != nil {
				return err
			}
			switch {
			case prev == nil:
				refused = fmt.Errorf("resumed run %s: %w", f.Resumes, store.ErrNotFound)
			case prev.Status != store.Interrupted || (prev.ResumedBy != "" && prev.ResumedBy != l.RunID):
				refused = fmt.Errorf("resume run %s (%s, resumed by %q): %w", f.Resumes, prev.Status, prev.ResumedBy, store.ErrIllegalTransition)
			}
			if refused != nil {
				return nil
			}
		}
		if tr != nil {
			if refused = checkTranscript(tb, &m, tr); refused != nil {
				return nil
			}
		}
		now := s.now()
		if tr != nil {
			if err := writeTranscript(tx, tb, &m, tr, w, thread, now); err != nil {
				return err
			}
		}
		if len(f.Events) > 0 {
			// A gap drops the events, not the finish (store.Finish).
			if _, _, err := s.appendEvents(tb, l.RunID, r, f.EventsFrom, f.Events); err != nil {
				return err
			}
		}
		applyFinish(r, f, now)
		r.End = m.Msgs
		if err := s.expireEvents(tx, l.Key, l.RunID, r, now); err != nil {
			return err
		}
		if err := putRun(tb, l.RunID, r); err != nil {
			return err
		}
		if resp != nil {
			if err := tb.Bucket(bResp).Put([]byte(l.RunID), resp); err != nil {
				return err
			}
			if err := w.use(tx, resp, thread); err != nil {
				return err
			}
		}
		if up != nil {
			// A thread bucket made before up/ existed lacks it.
			ub, err := tb.CreateBucketIfNotExists(bUp)
			if err != nil {
				return err
			}
			if err := ub.Put([]byte(l.RunID), up); err != nil {
				return err
			}
			if err := w.use(tx, up, thread); err != nil {
				return err
			}
		}
		ib := tb.Bucket(bIntr)
		for _, in := range f.Interrupts {
			if err := putJSON(ib, []byte(in.CallID), intrRec{Name: in.Name, Status: store.Pending, Run: l.RunID}); err != nil {
				return err
			}
		}
		for _, set := range []struct {
			ids []string
			to  store.InterruptStatus
		}{{f.Resolve, store.Resolved}, {f.Cancel, store.Cancelled}} {
			for _, id := range set.ids {
				var in intrRec
				ok, err := getJSON(ib, []byte(id), &in)
				if err != nil {
					return err
				}
				if ok && in.Status == store.Pending {
					in.Status = set.to
					if err := putJSON(ib, []byte(id), in); err != nil {
						return err
					}
				}
			}
		}
		if prev != nil {
			prev.ResumedBy = l.RunID
			if err := putRun(tb, f.Resumes, prev); err != nil {
				return err
			}
		}
		m.LeaseRun, m.LeaseOwner, m.LeaseToken, m.LeaseExp = "", "", 0, 0
		if r.N == m.Runs {
			m.LastStatus = f.Status
		}
		if f.Usage != nil {
			m.Usage = m.Usage.Add(*f.Usage)
		}
		if f.Model != "" {
			m.Model = f.Model
		}
		if m.Created != 0 {
			m.Updated = now
		}
		if err := tx.Bucket(bActive).deleteOnce(tx.runKey(l.Key, l.RunID)); err != nil {
			return err
		}
		if err := putMeta(tb, &m); err != nil {
			return err
		}
		return touchIndex(tx, l.Key, &m)
	})
	w.end(err)
	if err == nil && refused == nil {
		s.notify(runKey(l.Key, l.RunID))
	}
	if err != nil {
		return err
	}
	return refused
}

func applyFinish(r *runRec, f *store.Finish, now int64) {
	r.Status, r.Reason, r.Finished = f.Status, f.Reason, now
	r.Error, r.Usage, r.AnswerStatus = f.Error, f.Usage, f.AnswerStatus
	if f.Model != "" {
		r.Model = f.Model
	}
	if f.Partial != nil {
		r.Partial = f.Partial
	}
	if f.InterruptedCalls != nil {
		r.InterruptedCalls = f.InterruptedCalls
	}
	if f.Repairs != nil {
		r.Repairs = f.Repairs
	}
	if f.Restored != nil {
		r.Restored = f.Restored
	}
	if f.SessionID != nil {
		r.SessionID = f.SessionID
	}
	if f.Redactions != nil {
		r.Redactions = f.Redactions
	}
}

// GetRun returns one run with its response and upstream bodies.
func (s *Store) GetRun(ctx context.Context, k store.Key, id string) (store.Run, error) {
	if err := k.Validate(); err != nil {
		return store.Run{}, err
	}
	var run store.Run
	found := false
	err := readAgain(func() error {
		found = false
		err := s.view(func(tx *Tx) error {
			tb, r, err := runIn(tx, k, id)
			if err != nil || r == nil {
				return err
			}
			found = true
			if run, err = s.runView(tb, k, id, r); err != nil {
				return err
			}
			run.Response = clone(tb.Bucket(bResp).Get([]byte(id)))
			if ub := tb.Bucket(bUp); ub != nil {
				run.UpstreamBody = clone(ub.Get([]byte(id)))
			}
			return nil
		})
		if err == nil && found {
			if run.Response, err = s.load(run.Response); err == nil {
				run.UpstreamBody, err = s.load(run.UpstreamBody)
			}
		}
		return err
	})
	if err == nil && !found {
		err = fmt.Errorf("run %s/%s: %w", k, id, store.ErrNotFound)
	}
	return run, err
}

// ListRuns returns the thread's runs oldest first.
func (s *Store) ListRuns(ctx context.Context, k store.Key) ([]store.Run, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	var runs []store.Run
	var order []int64
	found := false
	err := s.view(func(tx *Tx) error {
		tb := threadBucket(tx, k)
		if tb == nil {
			return nil
		}
		found = true
		in, err := interrupts(tb)
		if err != nil {
			return err
		}
		return tb.Bucket(bRuns).ForEach(func(id, v []byte) error {
			var r runRec
			if err := json.Unmarshal(v, &r); err != nil {
				return err
			}
			run := r.toRun(k, string(id))
			if l := in[string(id)]; l != nil {
				run.Interrupts = l
			}
			runs = append(runs, run)
			order = append(order, r.N)
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	if !found {
		return nil, fmt.Errorf("thread %s: %w", k, store.ErrNotFound)
	}
	idx := make([]int, len(runs))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return order[idx[a]] < order[idx[b]] })
	out := make([]store.Run, 0, len(runs))
	for _, i := range idx {
		out = append(out, runs[i])
	}
	return out, nil
}

// FindRun returns the thread a run id belongs to.
func (s *Store) FindRun(ctx context.Context, tenant, id string) (store.Key, error) {
	var th []byte
	err := s.view(func(tx *Tx) error {
		th = clone(tx.Bucket(bRunIDs).Get([]byte(tenant + "\x00" + id)))
		return nil
	})
	if err != nil {
		return store.Key{}, err
	}
	if th == nil {
		return store.Key{}, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return store.Key{Tenant: tenant, Thread: string(th)}, nil
}

// RequestCancel flags a running run.
func (s *Store) RequestCancel(ctx context.Context, k store.Key, id string) (store.Run, error) {
	if err := k.Validate(); err != nil {
		return store.Run{}, err
	}
	err := s.update(func(tx *Tx) error {
		tb, r, err := runIn(tx, k, id)
		if err != nil || r == nil || r.Status != store.Running || r.Cancel {
			return err
		}
		r.Cancel = true
		return putRun(tb, id, r)
	})
	if err != nil {
		return store.Run{}, err
	}
	return s.GetRun(ctx, k, id)
}

// Sweep fails runs whose lease lapsed and drops expired event logs.
func (s *Store) Sweep(ctx context.Context) ([]store.RunRef, error) {
	var lost []store.RunRef
	err := s.update(func(tx *Tx) error {
		lost = lost[:0]
		now := s.now()
		var keys [][]byte
		if err := tx.Bucket(bActive).ForEach(func(k, _ []byte) error {
			keys = append(keys, clone(k))
			return nil
		}); err != nil {
			return err
		}
		for _, key := range keys {
			parts := strings.SplitN(string(key), "\x00", 3)
			k, id := store.Key{Tenant: parts[0], Thread: parts[1]}, parts[2]
			tb := threadBucket(tx, k)
			if tb == nil {
				if err := tx.Bucket(bActive).deleteOnce(key); err != nil {
					return err
				}
				continue
			}
			m, err := loadMeta(tb)
			if err != nil {
				return err
			}
			if m.LeaseRun == id && m.LeaseExp > now {
				continue
			}
			ok, err := s.markLost(tx, tb, k, &m, id, now)
			if err != nil {
				return err
			}
			if err := putMeta(tb, &m); err != nil {
				return err
			}
			if ok {
				lost = append(lost, store.RunRef{Key: k, RunID: id})
			}
		}
		// Expired event logs.
		c := tx.Bucket(bEvExp).Cursor()
		var drop [][]byte
		for key, _ := c.First(); key != nil && len(key) > 8 && int64(beU64(key)) <= now; key, _ = c.Next() {
			drop = append(drop, clone(key))
		}
		for _, key := range drop {
			parts := strings.SplitN(string(key[8:]), "\x00", 3)
			if tb := threadBucket(tx, store.Key{Tenant: parts[0], Thread: parts[1]}); tb != nil {
				if err := tb.Bucket(bEv).DeleteBucket([]byte(parts[2])); err != nil {
					return err
				}
			}
			if err := tx.Bucket(bEvExp).Delete(key); err != nil {
				return err
			}
		}
		return nil
	})
	for _, r := range lost {
		s.notify(runKey(r.Key, r.RunID))
	}
	return lost, err
}

func beU64(b []byte) uint64 {
	var v uint64
	for _, c := range b[:8] {
		v = v<<8 | uint64(c)
	}
	return v
}

// revivable reports whether a finish under l may end run r although a
// sweep marked it lost (its replica could not reach the store, and
// spooled the finish): no lease was taken on the thread since l, so
// nothing newer was written.
func revivable(r *runRec, m *threadMeta, l store.Lease) bool {
	return r.Status == store.Failed && r.Reason == store.ReasonProxyLost && l.Token != 0 &&
		r.LeaseToken == l.Token && m.LeaseRun == "" && m.LeaseSeq == l.Token
}

// finishedAgain judges a Finish on a run that already ended: the same
// finish again succeeds; another status from the same lease is an illegal
// transition; a run swept or finished under another lease is fenced.
func finishedAgain(status store.Status, reason string, token int64, l store.Lease, to store.Status) error {
	switch {
	case token != l.Token || reason == store.ReasonProxyLost:
		return fmt.Errorf("run %s ended (%s %s): %w", l.RunID, status, reason, store.ErrFenced)
	case status == to:
		return nil
	default:
		return fmt.Errorf("run %s is %s, not %s: %w", l.RunID, status, to, store.ErrIllegalTransition)
	}
}
