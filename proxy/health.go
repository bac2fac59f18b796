// Health and readiness: /healthz answers while the process runs; /readyz
// while it is not draining and its store answers a ping in time, with the
// store's durability guarantee for acknowledged turns.

package proxy

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/chronicle-proxy/chronicle/proxy/internal/metrics"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
)

func (s *Server) serveHealthz(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("application/json")
	ctx.SetBodyString(`{"status":"ok","version":"` + Version + `"}`)
}

func (s *Server) serveReadyz(ctx *fasthttp.RequestCtx) {
	ctx.SetContentType("application/json")
	if s.draining.Load() {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.SetBodyString(`{"status":"draining"}`)
		return
	}
	if s.store != nil {
		if err := s.pingStore(readyTimeout); err != nil {
			s.log.Warn("readiness check failed", "err", err)
			ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
			ctx.SetBodyString(`{"status":"store_unavailable"}`)
			return
		}
	}
	if d, _ := s.durability.Load().(string); d != "" {
		ctx.SetBodyString(`{"status":"ok","durability":` + strconv.Quote(d) + `}`)
		return
	}
	ctx.SetBodyString(`{"status":"ok"}`)
}

// backend is the store the server was given, without the metering.
func (s *Server) backend() store.Store {
	if ms, ok := s.store.(*metrics.Store); ok {
		return ms.Store
	}
	return s.store
}

// reportDurability reads the store's guarantee for acknowledged turns
// (store.Durability), logs it and keeps it for /readyz; it tries again
// every minute, so a change of the Redis settings shows up.
func (s *Server) reportDurability(ctx context.Context) {
	d, ok := s.backend().(store.Durability)
	if !ok {
		return
	}
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		c, cancel := context.WithTimeout(ctx, readyTimeout)
		line, err := d.Durability(c)
		cancel()
		if err == nil && line != s.durability.Load() {
			s.durability.Store(line)
			s.log.Info("durability of acknowledged turns", "guarantee", line)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readyTimeout bounds /readyz's store ping.
const readyTimeout = 2 * time.Second

// errPingTimeout: the store did not answer a readiness ping in time.
var errPingTimeout = errors.New("proxy: the store did not answer the readiness ping in time")

// storePing is one readiness ping in flight.
type storePing struct {
	done chan struct{}
	err  error
}

// pingStore pings the store and waits at most timeout for the answer. The
// wait does not rely on the store honouring the context: a Redis server
// that hangs (SIGSTOP, a full disk) holds a read until the client's own
// read timeout, longer than a readiness probe waits. One ping runs at a
// time; /readyz calls that arrive meanwhile wait for that one, so a hung
// store costs one goroutine, not one per probe.
func (s *Server) pingStore(timeout time.Duration) error {
	s.readyMu.Lock()
	p := s.readyPing
	if p == nil {
		p = &storePing{done: make(chan struct{})}
		s.readyPing = p
		go func() {
			c, cancel := context.WithTimeout(context.Background(), timeout)
			p.err = s.store.Ping(c)
			cancel()
			s.readyMu.Lock()
			s.readyPing = nil
			s.readyMu.Unlock()
			close(p.done)
		}()
	}
	s.readyMu.Unlock()
	wait := time.NewTimer(timeout)
	defer wait.Stop()
	select {
	case <-p.done:
		return p.err
	case <-wait.C:
		return errPingTimeout
	}
}
