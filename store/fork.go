package store

import (
	"context"
	"fmt"
)

// Fork asks for a new thread that starts as a prefix of another.
type Fork struct {
	From Key // the parent thread
	To   Key // the new thread; it must not exist (ErrConflict)
	// At is how many of the parent's messages the fork keeps: 1 to the
	// parent's message count (more is ErrInvalid).
	At int
	// Run names the parent's run whose end the fork point is (the caller
	// found At on it, Run.End); "" for a fork at a message count. It is
	// recorded, not checked.
	Run string
	// Subjects are recorded on the new thread and in its tenant's subject
	// index, as a run's StartRun.Subject is (store.Erasure): the caller
	// passes the parent's (ThreadSubjects), so that erasing a subject
	// erases the forks of its threads too.
	Subjects []string
}

// ForkPoint is where a thread was forked from; the zero value means the
// thread is no fork.
type ForkPoint struct {
	Parent string // the parent thread's id (same tenant)
	At     int    // messages kept from the parent
	Run    string // the parent's run the fork was taken at, "" when by count
}

// Forks copies a thread's prefix into a new thread.
type Forks interface {
	// ForkThread creates f.To holding the first f.At messages of f.From
	// byte for byte, with their hashes, the parent's system blob,
	// connection, format and model, and f.To's ForkPoint; it returns the
	// new thread as LoadThread would. The copy is of the parent's
	// transcript as committed when the fork reads it (one atomic read): a
	// run in flight on the parent does not stop a fork (its pending input
	// is a committed transcript like any other) and nothing of the fork
	// changes when the parent moves on. The new thread appears whole or
	// not at all: a crash midway leaves no thread a reader can load (at
	// most, in Redis, an index entry the audit listing skips). The new
	// thread has no runs, no interrupts and no events.
	//
	// Errors: ErrNotFound (no parent transcript), ErrInvalid (f.At out of
	// range, bad keys, From and To in different tenants or equal),
	// ErrConflict (f.To exists).
	ForkThread(ctx context.Context, f Fork) (Thread, error)
}

// Check validates the shape of a fork before a backend reads anything.
func (f *Fork) Check() error {
	if err := f.From.Validate(); err != nil {
		return err
	}
	if err := f.To.Validate(); err != nil {
		return err
	}
	if f.From.Tenant != f.To.Tenant || f.From.Thread == f.To.Thread {
		return fmt.Errorf("%w: fork %s to %s", ErrInvalid, f.From, f.To)
	}
	if f.At < 1 {
		return fmt.Errorf("%w: fork at %d messages", ErrInvalid, f.At)
	}
	if f.Run != "" {
		if err := ValidID(f.Run); err != nil {
			return err
		}
	}
	for _, s := range f.Subjects {
		if err := ValidSubject(s); err != nil {
			return err
		}
	}
	return nil
}

// ForkSource checks f, reads the parent with load (the backend's
// LoadThread) and cuts it to the fork: the new thread's transcript (Keep
// 0, the first f.At messages and their hashes, the parent's system,
// connection, format and model). ErrInvalid when the parent has fewer
// than f.At messages; load's error when it has none.
func ForkSource(ctx context.Context, f *Fork, load func(context.Context, Key) (Thread, error)) (Transcript, error) {
	if err := f.Check(); err != nil {
		return Transcript{}, err
	}
	parent, err := load(ctx, f.From)
	if err != nil {
		return Transcript{}, err
	}
	if f.At > len(parent.Messages) {
		return Transcript{}, fmt.Errorf("%w: fork at %d of %d messages", ErrInvalid, f.At, len(parent.Messages))
	}
	hs := parent.Hashes[:f.At:f.At]
	return Transcript{
		Messages: parent.Messages[:f.At:f.At], Hashes: hs, System: parent.System,
		Connection: parent.Connection, Format: parent.Format, Model: parent.Model,
		Digest: Digest(hs),
	}, nil
}
