package embedded

import (
	"errors"

	bolt "go.etcd.io/bbolt"
)

// op is one write. fn runs inside a shared read-write transaction; it must
// check everything before it writes, report refusals through its own
// captured result (returning nil), and return an error only for failures of
// the database itself. It may run more than once.
type op struct {
	fn   func(tx *bolt.Tx) error
	done chan error
}

// maxGroup bounds how many writes share one transaction (one fsync).
const maxGroup = 128

// committer is a group commit loop: a lone writer commits at once, and
// writers that arrive while a commit is syncing share the next one.
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
		group = append(group[:0], first)
	drain:
		for len(group) < maxGroup {
			select {
			case o := <-s.ops:
				group = append(group, o)
			default:
				break drain
			}
		}
		s.commits.Add(1)
		s.grouped.Add(int64(len(group)))
		err := s.db.Update(func(tx *bolt.Tx) error {
			for _, o := range group {
				if err := o.fn(tx); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil || len(group) == 1 {
			for _, o := range group {
				o.done <- err
			}
			continue
		}
		// One write failed the shared transaction: run each alone so only
		// the failing one sees its error.
		for _, o := range group {
			o.done <- s.db.Update(o.fn)
		}
	}
}

var errClosed = errors.New("embedded store closed")

// update runs fn in the next group commit and waits for its result.
func (s *Store) update(fn func(tx *bolt.Tx) error) error {
	o := op{fn: fn, done: make(chan error, 1)}
	select {
	case s.ops <- o:
	case <-s.stop:
		return unavailable(errClosed)
	}
	var err error
	select {
	case err = <-o.done:
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
