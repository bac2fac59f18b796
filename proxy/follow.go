package proxy

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/formats"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
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
	// lostAt, once done, is the sequence number of the error event that
	// ends a run lost with its replica (proxy_lost): its log ends without
	// the provider's end, and the feed tells its followers so. 0: not lost.
	lostAt int64
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
		err := f.st.FollowEvents(ctx, k, runID, 0, func(e store.Event) error {
			ev := store.Event{Seq: e.Seq, Data: append([]byte(nil), e.Data...)}
			feed.mu.Lock()
			feed.events = append(feed.events, ev)
			close(feed.wake)
			feed.wake = make(chan struct{})
			feed.mu.Unlock()
			return nil
		})
		lostAt := int64(0)
		if err == nil {
			lostAt = f.lostAt(k, runID)
		}
		f.mu.Lock()
		if f.feeds[key] == feed {
			delete(f.feeds, key) // a later follower starts afresh from the store
		}
		f.mu.Unlock()
		feed.mu.Lock()
		feed.done, feed.lostAt = true, lostAt
		close(feed.wake)
		feed.mu.Unlock()
	}()
	return feed
}

// lostAt reports, for a run whose log has ended, the sequence number its
// proxy_lost error event takes (one past its last event), or 0 when the
// run was not lost with its replica.
func (f *runFeeds) lostAt(k store.Key, runID string) int64 {
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	run, err := f.st.GetRun(rctx, k, runID)
	if err != nil || run.Status != store.Failed || run.Reason != store.ReasonProxyLost {
		return 0
	}
	return run.Events + 1
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

// ended reports, once the feed is done, the sequence number of the lost
// run's error event (see lostAt).
func (feed *runFeed) ended() int64 {
	feed.mu.Lock()
	defer feed.mu.Unlock()
	return feed.lostAt
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
// left while the run is silent. A run lost with its replica (proxy_lost)
// ends with an error event in the caller's provider shape (ad; nil: the
// thread's format), so the client knows to start again.
func (s *Server) streamEvents(w *bufio.Writer, conn net.Conn, k store.Key, runID string, after int64, ids bool, ad adapters.Adapter) {
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
			if lost := feed.ended(); lost > 0 {
				s.writeLost(w, k, lost, ids, ad)
				_ = flush()
			}
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

// writeLost writes the error event that ends a run lost with its replica:
// in ad's shape, or in the thread's format's when ad is nil (the events
// endpoint, which names no connection); with ids, under "id: <seq>".
func (s *Server) writeLost(w *bufio.Writer, k store.Key, seq int64, ids bool, ad adapters.Adapter) {
	if ad == nil {
		ad = s.threadAdapter(k)
	}
	ev := apierr.Event(ad, apierr.New(apierr.ProxyLost, proxyLostMessage))
	if ids {
		eol := "\n"
		if bytes.Contains(ev, []byte("\r\n")) {
			eol = "\r\n"
		}
		_, _ = w.WriteString("id: " + strconv.FormatInt(seq, 10) + eol)
	}
	_, _ = w.Write(ev)
}

// threadAdapter is an adapter of the thread's wire format, for chronicle's
// own events where no connection names one (OpenAI chat's when the thread
// cannot be read).
func (s *Server) threadAdapter(k store.Key) adapters.Adapter {
	rctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	defer cancel()
	th, err := s.store.LoadThread(rctx, k)
	if err != nil {
		return openAIAdapter
	}
	return formats.ForThread(adapters.Format(th.Format))
}
