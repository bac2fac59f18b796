package embedded

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	"github.com/chronicle-proxy/chronicle/store"
)

// wait returns a channel closed at the next change of the run's event log
// or status. Take it before reading, so no change is missed.
func (s *Store) wait(run string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.waiters[run]
	if ch == nil {
		ch = make(chan struct{})
		s.waiters[run] = ch
	}
	return ch
}

func (s *Store) notify(run string) {
	s.mu.Lock()
	ch := s.waiters[run]
	delete(s.waiters, run)
	s.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// AppendEvents appends events first, first+1, … under the run's lease.
func (s *Store) AppendEvents(ctx context.Context, l store.Lease, first int64, events [][]byte) error {
	if first < 1 {
		return fmt.Errorf("%w: first event %d", store.ErrInvalid, first)
	}
	if len(events) == 0 {
		return nil
	}
	var refused error
	err := s.update(func(tx *Tx) error {
		tb, _, r, err, ref := leased(tx, l)
		if refused = ref; err != nil || ref != nil {
			return err
		}
		var changed bool
		if changed, refused, err = s.appendEvents(tb, l.RunID, r, first, events); err != nil || !changed {
			return err
		}
		return putRun(tb, l.RunID, r)
	})
	if err == nil && refused == nil {
		s.notify(runKey(l.Key, l.RunID))
	}
	if err != nil {
		return err
	}
	return refused
}

// appendEvents stores events first, first+1, … of run r, skipping those
// stored already, and counts them in r; the caller writes r back when it
// changed. A gap is refused.
func (s *Store) appendEvents(tb *Bucket, run string, r *runRec, first int64, events [][]byte) (changed bool, refused, err error) {
	n := r.Events
	if first > n+1 {
		return false, fmt.Errorf("run %s has %d events, append starts at %d: %w", run, n, first, store.ErrConflict), nil
	}
	if first+int64(len(events))-1 <= n {
		return false, nil, nil // already stored
	}
	eb := tb.Bucket(bEv).Bucket([]byte(run))
	old := n
	for i, ev := range events {
		seq := first + int64(i)
		if seq <= n {
			continue
		}
		if err := eb.Put(u64(uint64(seq)), ev); err != nil {
			return false, nil, err
		}
		n = seq
	}
	if keep := s.opts.MaxEvents; keep > 0 && n > keep {
		// The log held events (old-keep, old]; drop those now older than
		// the newest keep, by key: seeking over the tombstones of earlier
		// trims would cost more with every turn.
		for seq := max(old-keep+1, 1); seq <= n-keep; seq++ {
			if err := eb.Delete(u64(uint64(seq))); err != nil {
				return false, nil, err
			}
		}
	}
	r.Events = n
	return true, nil, nil
}

const followBatch = 256

// FollowEvents delivers events after `after` and follows until the run ends.
func (s *Store) FollowEvents(ctx context.Context, k store.Key, id string, after int64, fn func(store.Event) error) error {
	if err := k.Validate(); err != nil {
		return err
	}
	rk := runKey(k, id)
	batch := make([]store.Event, 0, followBatch)
	for {
		changed := s.wait(rk)
		batch = batch[:0]
		var ended, found bool
		err := s.view(func(tx *Tx) error {
			tb, r, err := runIn(tx, k, id)
			if err != nil || r == nil {
				return err
			}
			found, ended = true, r.Status.Ended()
			eb := tb.Bucket(bEv).Bucket([]byte(id))
			if eb == nil {
				return nil
			}
			c := eb.Cursor()
			for key, v := c.Seek(u64(uint64(after + 1))); key != nil && len(batch) < followBatch; key, v = c.Next() {
				batch = append(batch, store.Event{Seq: int64(binary.BigEndian.Uint64(key)), Data: clone(v)})
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("run %s/%s: %w", k, id, store.ErrNotFound)
		}
		for _, ev := range batch {
			if err := fn(ev); err != nil {
				return err
			}
			after = ev.Seq
		}
		if len(batch) > 0 {
			continue
		}
		if ended {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stop:
			return store.ErrUnavailable
		}
	}
}

// ListThreads lists threads newest-updated first.
func (s *Store) ListThreads(ctx context.Context, q store.ThreadQuery) (store.ThreadPage, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	if limit > 500 {
		limit = 500
	}
	var cursor []byte
	if q.Cursor != "" {
		c, err := hex.DecodeString(q.Cursor)
		if err != nil {
			return store.ThreadPage{}, fmt.Errorf("%w: cursor", store.ErrInvalid)
		}
		cursor = c
	}
	page := store.ThreadPage{Threads: []store.ThreadSummary{}}
	err := s.view(func(tx *Tx) error {
		bucket, prefix := tx.Bucket(bGidx), []byte(nil)
		if q.Tenant != "" {
			bucket, prefix = tx.Bucket(bIdx), []byte(q.Tenant+"\x00")
		}
		c := bucket.Cursor()
		var key []byte
		if cursor != nil {
			key, _ = c.Seek(cursor)
			if bytes.Equal(key, cursor) {
				key, _ = c.Next()
			}
		} else {
			key, _ = c.Seek(prefix)
		}
		for ; key != nil && bytes.HasPrefix(key, prefix); key, _ = c.Next() {
			rest := key[len(prefix):]
			updated := int64(^binary.BigEndian.Uint64(rest[:8]))
			if !q.Since.IsZero() && updated < q.Since.UnixMilli() {
				break // older from here on
			}
			if !q.Until.IsZero() && updated > q.Until.UnixMilli() {
				continue
			}
			k := store.Key{Tenant: q.Tenant, Thread: string(rest[8:])}
			if q.Tenant == "" {
				i := bytes.IndexByte(rest[8:], 0)
				k = store.Key{Tenant: string(rest[8 : 8+i]), Thread: string(rest[8+i+1:])}
			}
			tb := threadBucket(tx, k)
			if tb == nil {
				continue
			}
			m, err := loadMeta(tb)
			if err != nil {
				return err
			}
			if (q.Connection != "" && m.Connection != q.Connection) || (q.Model != "" && m.Model != q.Model) || (q.Status != "" && m.LastStatus != q.Status) {
				continue
			}
			if len(page.Threads) == limit {
				page.NextCursor = hex.EncodeToString(cursor)
				break
			}
			page.Threads = append(page.Threads, store.ThreadSummary{Key: k, Connection: m.Connection, Format: m.Format, Model: m.Model,
				CreatedAt: fromMS(m.Created), UpdatedAt: fromMS(m.Updated), Runs: m.Runs, LastStatus: m.LastStatus, Usage: m.Usage, Fork: m.fork()})
			cursor = clone(key)
		}
		return nil
	})
	return page, err
}

// ListTenants lists tenants that have at least one thread.
func (s *Store) ListTenants(ctx context.Context) ([]string, error) {
	out := []string{}
	err := s.view(func(tx *Tx) error {
		c := tx.Bucket(bIdx).Cursor()
		for key, _ := c.First(); key != nil; {
			i := bytes.IndexByte(key, 0)
			out = append(out, string(key[:i]))
			key, _ = c.Seek(append([]byte(key[:i:i]), 1))
		}
		return nil
	})
	return out, err
}
