package embedded

import (
	"context"
	"fmt"

	"github.com/chronicle-proxy/chronicle/store"
)

// ForkThread copies the parent's prefix into a new thread
// (store.Forks). The parent is read as LoadThread reads it (large
// messages from their files), and the new thread is written in one
// transaction, its large messages in files of its own (a file belongs
// to one thread: deleting the parent must not take the fork's), so a
// crash leaves the whole fork or nothing.
func (s *Store) ForkThread(ctx context.Context, f store.Fork) (store.Thread, error) {
	t, err := store.ForkSource(ctx, &f, s.LoadThread)
	if err != nil {
		return store.Thread{}, err
	}
	w := s.blobWrite()
	stored, err := w.transcript(&t)
	if err == nil {
		err = w.sync()
	}
	if err != nil {
		w.end(err)
		return store.Thread{}, err
	}
	var refused error
	var th store.Thread
	err = s.update(func(tx *Tx) error {
		refused = nil
		w.begin()
		// A bucket without a transcript may still hold runs (a first
		// run that failed before writing one): the id is taken either way.
		if threadBucket(tx, f.To) != nil {
			refused = fmt.Errorf("thread %s: exists: %w", f.To, store.ErrConflict)
			return nil
		}
		tb, err := createThreadBucket(tx, f.To)
		if err != nil {
			return err
		}
		for _, subject := range f.Subjects {
			if err := addSubject(tx, tb, f.To, subject); err != nil {
				return err
			}
		}
		m := threadMeta{ForkParent: f.From.Thread, ForkAt: f.At, ForkRun: f.Run}
		if err := writeTranscript(tx, tb, &m, stored, w, threadID(f.To), s.now()); err != nil {
			return err
		}
		if err := putMeta(tb, &m); err != nil {
			return err
		}
		th = store.Thread{Key: f.To, Connection: m.Connection, Format: m.Format, Model: m.Model,
			System: t.System, Messages: t.Messages, Hashes: t.Hashes, Version: m.Version,
			CreatedAt: fromMS(m.Created), UpdatedAt: fromMS(m.Updated), Fork: m.fork()}
		return touchIndex(tx, f.To, &m)
	})
	w.end(err)
	if err != nil {
		return store.Thread{}, err
	}
	if refused != nil {
		return store.Thread{}, refused
	}
	return th, nil
}
