package proxy

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
)

// runFeeds shares one store follower per run among all of this replica's
// followers of that run. A thousand clients following one run cost one
// store read loop (one Redis connection), not a thousand.
type runFeeds struct {
	st    store.Store
	mu    sync.Mutex
	feeds map[string]*runFeed
}

// runFeed is one run's events as read from the store, shared by its
// followers. It keeps the run's events while anyone follows (a run's log
// is bounded by its stream), so a follower starting from any id is served
// from memory.
type runFeed struct {
	key    string
	mu     sync.Mutex
	events []store.Event
	done   bool
	wake   chan struct{} // closed (and replaced) when events arrive or the feed ends
	refs   int
	cancel context.CancelFunc
}

func newRunFeeds(st store.Store) *runFeeds {
	return &runFeeds{st: st, feeds: map[string]*runFeed{}}
}

// subscribe returns the run's feed, starting its store follower if it is
// the first subscriber. Call unsubscribe when done.
func (f *runFeeds) subscribe(k store.Key, runID string) *runFeed {
	key := localKey(k, runID)
	f.mu.Lock()
	defer f.mu.Unlock()
	if feed := f.feeds[key]; feed != nil {
		feed.refs++
		return feed
	}
	ctx, cancel := context.WithCancel(context.Background())
	feed := &runFeed{key: key, wake: make(chan struct{}), refs: 1, cancel: cancel}
	f.feeds[key] = feed
	go func() {
		_ = f.st.FollowEvents(ctx, k, runID, 0, func(e store.Event) error {
			ev := store.Event{Seq: e.Seq, Data: append([]byte(nil), e.Data...)}
			feed.mu.Lock()
			feed.events = append(feed.events, ev)
			close(feed.wake)
			feed.wake = make(chan struct{})
			feed.mu.Unlock()
			return nil
		})
		f.mu.Lock()
		if f.feeds[key] == feed {
			delete(f.feeds, key) // a later follower starts afresh from the store
		}
		f.mu.Unlock()
		feed.mu.Lock()
		feed.done = true
		close(feed.wake)
		feed.mu.Unlock()
	}()
	return feed
}

// unsubscribe drops one follower; the last one stops the store follower.
func (f *runFeeds) unsubscribe(feed *runFeed) {
	f.mu.Lock()
	defer f.mu.Unlock()
	feed.refs--
	if feed.refs == 0 {
		if f.feeds[feed.key] == feed {
			delete(f.feeds, feed.key)
		}
		feed.cancel()
	}
}

// from returns the events after seq `after` starting at index hint, whether
// the feed has ended, and a channel closed when that changes.
func (feed *runFeed) from(after int64, idx int) ([]store.Event, int, bool, <-chan struct{}) {
	feed.mu.Lock()
	defer feed.mu.Unlock()
	for idx < len(feed.events) && feed.events[idx].Seq <= after {
		idx++
	}
	return feed.events[idx:len(feed.events):len(feed.events)], len(feed.events), feed.done, feed.wake
}

// streamEvents writes a run's events after `after` to w as they become
// available, until the run ends or the client leaves. With ids, each event
// is preceded by "id: <seq>" (the events endpoint); without, the events go
// out as the provider sent them (a retry answered from the store). Each
// flush carries its own write deadline, and heartbeats find a client that
// left while the run is silent.
func (s *Server) streamEvents(w *bufio.Writer, conn net.Conn, k store.Key, runID string, after int64, ids bool) {
	feed := s.feeds.subscribe(k, runID)
	defer s.feeds.unsubscribe(feed)
	writeTimeout := s.cfg.Limits.WriteTimeout.D()
	flush := func() error { return flushWithin(w, conn, writeTimeout) }
	beat := time.NewTimer(s.cfg.Limits.Heartbeat.D())
	defer beat.Stop()
	idBuf := make([]byte, 0, 32)
	idx := 0
	for {
		events, next, done, wake := feed.from(after, idx)
		idx = next
		for _, e := range events {
			if ids {
				idBuf = append(idBuf[:0], "id: "...)
				idBuf = strconv.AppendInt(idBuf, e.Seq, 10)
				if bytes.Contains(e.Data, []byte("\r\n")) {
					idBuf = append(idBuf, '\r', '\n')
				} else {
					idBuf = append(idBuf, '\n')
				}
				if _, err := w.Write(idBuf); err != nil {
					return
				}
			}
			if _, err := w.Write(e.Data); err != nil {
				return
			}
			after = e.Seq
		}
		if len(events) > 0 {
			if flush() != nil {
				return
			}
		}
		if done {
			return
		}
		select {
		case <-wake:
		case <-beat.C:
			if _, err := w.Write(heartbeat); err != nil || flush() != nil {
				return
			}
			beat.Reset(s.cfg.Limits.Heartbeat.D())
		}
	}
}
