package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/chronicle-proxy/chronicle/proxy/internal/threaddoc"
	"github.com/chronicle-proxy/chronicle/store"
)

// Thread returns the thread document (the tenant API's thread JSON) of k,
// or an error wrapping store.ErrNotFound.
func (a *Audit) Thread(ctx context.Context, k store.Key) ([]byte, error) {
	th, runs, err := a.load(ctx, k)
	if err != nil {
		return nil, err
	}
	return threaddoc.Append(nil, th, runs, false), nil
}

func (a *Audit) load(ctx context.Context, k store.Key) (store.Thread, []store.Run, error) {
	if err := k.Validate(); err != nil {
		return store.Thread{}, nil, fmt.Errorf("%w: %w", ErrBadFilter, err)
	}
	th, err := a.st.LoadThread(ctx, k)
	if err != nil {
		return th, nil, err
	}
	runs, err := a.st.ListRuns(ctx, k)
	if err != nil {
		return th, nil, err
	}
	return th, runs, nil
}

// flusher is a writer that can push what it buffered (bufio.Writer).
type flusher interface{ Flush() error }

// Export writes every thread that passes q (Cursor and Limit ignored) to w
// as JSONL, one thread document per line, newest-updated first. It walks
// the index a page at a time and holds one page of summaries and one thread
// in memory; after each page it flushes w when w can. progress, when not
// nil, is called with the count written so far after every thread. A
// thread deleted while the export runs is skipped.
func (a *Audit) Export(ctx context.Context, q AuditQuery, w io.Writer, progress func(done int)) (int, error) {
	q.Cursor, q.Limit = "", 0
	if err := q.Check(); err != nil {
		return 0, err
	}
	n := 0
	var line []byte
	fl, _ := w.(flusher)
	needle := q.Text
	q.Text = "" // scan below loads every thread anyway: search it here
	lower := strings.ToLower(needle)
	var cursor string
	for {
		page, err := a.st.ListThreads(ctx, q.storeQuery(cursor, scanPage))
		if err != nil {
			return n, storeErr(err)
		}
		for _, s := range page.Threads {
			th, runs, err := a.load(ctx, s.Key)
			if errors.Is(err, store.ErrNotFound) {
				continue
			}
			if err != nil {
				return n, err
			}
			if lower != "" && !threadContains(th, lower) {
				continue
			}
			line = threaddoc.Append(line[:0], th, runs, true)
			line = append(line, '\n')
			if _, err := w.Write(line); err != nil {
				return n, err
			}
			n++
			if progress != nil {
				progress(n)
			}
		}
		if fl != nil {
			if err := fl.Flush(); err != nil {
				return n, err
			}
		}
		if page.NextCursor == "" {
			return n, nil
		}
		cursor = page.NextCursor
		if err := ctx.Err(); err != nil {
			return n, err
		}
	}
}

// ExportThread writes one thread as a JSONL line.
func (a *Audit) ExportThread(ctx context.Context, k store.Key, w io.Writer) error {
	th, runs, err := a.load(ctx, k)
	if err != nil {
		return err
	}
	_, err = w.Write(append(threaddoc.Append(nil, th, runs, true), '\n'))
	return err
}

// Delete removes a thread and everything it owns (messages, runs, event
// logs, interrupts, index entries). A thread with a running run is
// refused with ErrBusy; a missing one wraps store.ErrNotFound.
func (a *Audit) Delete(ctx context.Context, k store.Key) (runs int, err error) {
	if err := k.Validate(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrBadFilter, err)
	}
	th, err := a.st.LoadThread(ctx, k)
	if err != nil {
		return 0, err
	}
	rs, err := a.st.ListRuns(ctx, k)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return 0, err
	}
	for _, r := range rs {
		if r.Status == store.Running {
			return 0, ErrBusy
		}
	}
	if err := a.st.DeleteThread(ctx, k); err != nil {
		return 0, err
	}
	// The audit trail keeps a tombstone (erasure.go), where the store can.
	if e, ok := store.As[store.Erasure](a.st); ok {
		out := Erased{Threads: 1, Runs: len(rs), Messages: len(th.Messages)}
		for _, r := range rs {
			out.Events += r.Events
		}
		ts := store.Tombstone{Scope: "thread", TenantHash: store.IDHash(k.Tenant), ThreadHashes: []string{store.IDHash(k.Tenant, k.Thread)}}
		if _, err := a.tombstone(ctx, e, Eraser{}, ts, out); err != nil {
			return len(rs), err
		}
	}
	return len(rs), nil
}

// ErrBusy: the thread has a running run.
var ErrBusy = errors.New("proxy: thread has a running run")
