// Package proxy owns chronicle's HTTP side: the fasthttp server and the
// routing of /{connection}/... to upstreams (server.go), health and
// readiness (health.go), and the request pipeline, one file per stage: auth.go, admit.go, begin.go, compose.go,
// upstream.go, relay_sse.go and relay.go, finish.go, driven by
// runPipeline (pipeline.go), with the run's event log, follow feeds and
// the thread cache beside them, and the request spans (tracing.go). The tenant API is proxy/api's (wired in
// tenantapi.go); the admin API, the audit page and pprof are proxy/admin's; metrics, errors, the shared JSON documents and the
// runtime mechanics are proxy/internal's.
//
// It never parses provider JSON itself; it asks the request's wire format
// (an adapters.Adapter). A Server is safe for concurrent use; build one
// with New and run it with Serve.
package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/formats"
	"github.com/chronicle-proxy/chronicle/limiter"
	"github.com/chronicle-proxy/chronicle/proxy/admin"
	"github.com/chronicle-proxy/chronicle/proxy/api"
	"github.com/chronicle-proxy/chronicle/proxy/config"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/proxy/internal/metrics"
	"github.com/chronicle-proxy/chronicle/proxy/internal/redact"
	"github.com/chronicle-proxy/chronicle/proxy/internal/sched"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"
)

// Version is the build's version, set by the linker (-X).
var Version = "dev"

// Options are what a Server needs beside its config.
type Options struct {
	// Logger receives the server's log; nil means slog.Default().
	Logger *slog.Logger
	// Store keeps threads and runs; nil means nothing is persisted (every
	// connection behaves as persist: false).
	Store store.Store
	// Gates and Rates hold the FIFO gates and rate limits; nil means
	// in-process ones (limits.mode: local).
	Gates limiter.Gates
	Rates limiter.RateLimiter
	// ReplicaID names this process in run records and leases; empty means
	// a random one.
	ReplicaID string
	// LargeRequestProcs, when above the GOMAXPROCS the server starts with,
	// is the GOMAXPROCS while a request of largeRequestBytes or more is in
	// flight (see sched.ProcBoost); 0 leaves GOMAXPROCS alone.
	LargeRequestProcs int
	// TracerProvider makes the spans of requests to connections
	// (telemetry.traces; see NewTracerProvider); nil means no spans at
	// all, and no trace context is added upstream.
	TracerProvider trace.TracerProvider
	// RetentionFirstPass is how long after Serve starts the retention
	// pass is first tried (then every retention.interval); 0 means
	// defaultRetentionFirstPass (retention.go).
	RetentionFirstPass time.Duration
}

// Server is a running chronicle proxy.
type Server struct {
	cfg       *config.Config
	log       *slog.Logger
	store     store.Store
	replicaID string
	// retentionFirst: Options.RetentionFirstPass, defaulted.
	retentionFirst time.Duration
	// starters run the start of a turn off the connection's goroutine
	// (beginOffStack; sched.Starters).
	starters *sched.Starters[startCall, startDone]
	// threads keeps the transcripts this replica last read or wrote (nil:
	// off).
	threads *threadCache
	// hashKeys keys message hashes per tenant when the store asks for it
	// (store.HashKeyer: encryption at rest); nil otherwise.
	hashKeys store.HashKeyer
	// procs raises GOMAXPROCS while a large request is in flight (nil:
	// never); pendingLarge holds what headerReceived took for a large
	// request (*largeRequest), by request header, until the handler takes
	// it; largeBodies lends large requests their body buffers.
	procs        *sched.ProcBoost
	pendingLarge sync.Map
	largeBodies  sched.BodyPool
	// storeTimeout bounds one store call on the request path.
	storeTimeout time.Duration
	metrics      *metrics.Metrics
	clients      *clientTable
	gates        limiter.Gates
	rates        limiter.RateLimiter
	conns        map[string]*upstream
	srv          *fasthttp.Server

	draining atomic.Bool
	// serving guards what Serve starts and Shutdown stops: a Shutdown
	// that comes before Serve (a signal during start-up) must not leave
	// Serve accepting on a listener nobody will close.
	serving     sync.Mutex
	shutDown    bool
	listener    net.Listener
	stopSweeper context.CancelFunc

	// local holds this replica's running turns by run, so a cancel that
	// arrives here stops them at once.
	local sync.Map // localKey → *turn

	metricsHandler fasthttp.RequestHandler
	// admin serves /admin, /ui and /debug.
	admin *admin.Handler
	// api serves /api (proxy/api).
	api *api.Handler
	// eventWriters write the runs' event logs.
	eventWriters eventWriters
	// eventWindows ends the event logs' batch windows.
	eventWindows eventWindows
	// feeds shares one store follower per run among local followers.
	feeds *runFeeds
	// sessionIDs caches the per-(connection, model) session ids.
	sessionIDs sync.Map
	// readyPing is the readiness ping in flight, if any (pingStore).
	readyMu   sync.Mutex
	readyPing *storePing
	// tracing makes request spans; nil when traces are off.
	tracing *tracing
	// durability is the store's guarantee for acknowledged turns, as last
	// read (reportDurability); a string, "" until read.
	durability atomic.Value
}

func localKey(k store.Key, runID string) string { return k.Tenant + "\x00" + k.Thread + "\x00" + runID }

// cancelLocal stops a run this replica is relaying, if it is one.
func (s *Server) cancelLocal(k store.Key, runID string) {
	if v, ok := s.local.Load(localKey(k, runID)); ok {
		v.(*turn).requestCancel()
	}
}

// upstream is one configured connection with its HTTP client and adapters.
type upstream struct {
	cfg    *config.Connection
	client *fasthttp.HostClient
	prefix string // scheme://host[:port]/base, what the client's path is appended to
	gate   limiter.Gate
	keys   *limiter.KeyPool // nil in pass-through mode
	// order keeps the gate's slot order on the way upstream.
	order dispatchOrder

	wires *formats.Connection // the wire formats of its requests
	// redact is the connection's redaction (redaction.go); nil: none.
	redact *redact.Rules
}

// openAIAdapter is OpenAI chat's adapter, for what no connection names a
// format for; it is immutable.
var openAIAdapter = formats.Default()

func newUpstream(c *config.Connection, cfg *config.Config, log *slog.Logger) *upstream {
	u := c.URL()
	up := &upstream{
		cfg:    c,
		client: newHostClient(u, cfg, c.MaxUpstreamConns),
		prefix: strings.TrimRight(u.Scheme+"://"+u.Host+u.EscapedPath(), "/"),
	}
	if len(c.Keys) > 0 {
		keys := make([]limiter.Secret, len(c.Keys))
		for i, k := range c.Keys {
			keys[i] = limiter.Secret(k.Reveal())
		}
		up.keys = limiter.NewKeyPool(keys, limiter.KeyPoolOptions{Logger: log.With("connection", c.Name)})
	}
	// Each connection gets its own adapters: the session headers are
	// connection config.
	up.wires = formats.ForConnection(string(c.Provider), c.SessionHeaders)
	// The config validated the patterns; a rule that fails to compile
	// here cannot happen.
	up.redact, _ = redact.New(c.Redact.Paths, redactPatterns(c.Redact.Patterns), c.Redact.Mask)
	return up
}

func redactPatterns(ps []config.RedactPattern) []redact.Pattern {
	out := make([]redact.Pattern, len(ps))
	for i, p := range ps {
		out[i] = redact.Pattern{Name: p.Name, Regex: p.Regex}
	}
	return out
}

// adapter is the wire format of a request to path on this connection.
func (u *upstream) adapter(path []byte) adapters.Adapter { return u.wires.Adapter(path) }

// New builds a Server from a validated config.
func New(cfg *config.Config, opts Options) (*Server, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{
		cfg:            cfg,
		log:            log,
		metrics:        metrics.New(Version),
		replicaID:      opts.ReplicaID,
		retentionFirst: opts.RetentionFirstPass,
		storeTimeout:   5 * time.Second,
		clients:        newClientTable(cfg.Clients),
		gates:          opts.Gates,
		rates:          opts.Rates,
		conns:          make(map[string]*upstream, len(cfg.Connections)),
		procs:          sched.NewProcBoost(opts.LargeRequestProcs),
		tracing:        newTracing(opts.TracerProvider, cfg.Telemetry.Traces),
	}
	s.starters = sched.NewStarters(s.startTurn, maxIdleStarters)
	if d := cfg.Store.OpTimeout.D(); d > 0 {
		s.storeTimeout = d
	}
	if opts.Store != nil {
		s.store = s.metrics.Meter(opts.Store)
		s.metrics.RegisterSpool(opts.Store)
		s.feeds = newRunFeeds(s.store)
		s.hashKeys, _ = opts.Store.(store.HashKeyer)
		if n := cfg.Store.ThreadCacheBytes; n != nil {
			s.threads = newThreadCache(*n)
		}
	}
	s.api = s.newTenantAPI()
	s.admin = admin.New(admin.Options{Store: s.store, Token: cfg.Admin.Token, Pprof: cfg.Admin.Pprof,
		Logger: log, StoreTimeout: s.storeTimeout, WriteTimeout: cfg.Limits.WriteTimeout.D(), Shape: openAIAdapter, Config: cfg})
	if s.gates == nil {
		s.gates = limiter.NewLocalGates()
	}
	if s.rates == nil {
		s.rates = limiter.NewLocalRateLimiter()
	}
	if s.replicaID == "" {
		s.replicaID = newID("replica_")
	}
	for i := range cfg.Connections {
		c := &cfg.Connections[i]
		if c.URL() == nil {
			return nil, fmt.Errorf("proxy: connection %q has no parsed base_url (config not validated)", c.Name)
		}
		up := newUpstream(c, cfg, log)
		up.gate = s.gates.Gate("conn:"+c.Name, limiter.GateConfig{
			MaxConcurrent: c.MaxConcurrent, MaxWaiting: c.Queue.MaxWaiting, Timeout: c.Queue.Timeout.D()})
		s.conns[c.Name] = up
	}
	s.metrics.RegisterGates(connGates(s.conns))
	s.metrics.RegisterConnections(connectionNames(cfg))
	s.metrics.RegisterThreadCache(threadCacheStats(s.threads))
	s.metricsHandler = s.metrics.Handler()
	l := cfg.Limits
	s.srv = &fasthttp.Server{
		Handler:               s.handle,
		ErrorHandler:          s.handleParseError,
		HeaderReceived:        s.headerReceived,
		Name:                  "chronicle",
		MaxRequestBodySize:    l.MaxBodyBytes,
		ReadBufferSize:        l.MaxHeaderBytes,
		ReadTimeout:           l.ReadTimeout.D(),
		WriteTimeout:          l.WriteTimeout.D(),
		IdleTimeout:           l.IdleTimeout.D(),
		Concurrency:           l.MaxConnections,
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		CloseOnShutdown:       true,
		// Release a connection's read buffer (max_header_bytes) while it
		// streams or idles: thousands of open streams would otherwise
		// each hold one.
		ReduceMemoryUsage: true,
		// Upstream header names pass back as the provider spelled them.
		DisableHeaderNamesNormalizing: false,
		Logger:                        fasthttpLogger{log},
		// Errors about a request fasthttp could not read leave its raw
		// buffer (client keys and all) out; what they still quote (the
		// request line, a bad header line) is redacted by fasthttpLogger.
		SecureErrorLogMessage: true,
	}
	return s, nil
}

func connectionNames(cfg *config.Config) []string {
	names := make([]string, len(cfg.Connections))
	for i := range cfg.Connections {
		names[i] = cfg.Connections[i].Name
	}
	return names
}

// Serve accepts connections on ln until Shutdown. With a store it also
// sweeps runs lost with their replica.
func (s *Server) Serve(ln net.Listener) error {
	s.serving.Lock()
	if s.shutDown {
		s.serving.Unlock()
		ln.Close()
		return nil
	}
	s.listener = ln
	if s.store != nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.stopSweeper = cancel
		go s.runSweeper(ctx)
		go s.reportDurability(ctx)
		if s.cfg.RetentionOn() {
			go s.runRetention(ctx) // retention.go
		}
	}
	s.serving.Unlock()
	return s.srv.Serve(ln)
}

// Shutdown stops accepting, lets requests and streams in flight finish until
// ctx ends, and returns ctx's error if some were still running then.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	s.serving.Lock()
	s.shutDown = true
	ln, stopSweeper := s.listener, s.stopSweeper
	s.serving.Unlock()
	err := s.srv.ShutdownWithContext(ctx)
	if ln != nil {
		// fasthttp closes the listeners its Serve has registered; one
		// handed to Serve an instant ago may not be yet.
		ln.Close()
	}
	if stopSweeper != nil {
		stopSweeper()
	}
	s.starters.Stop()
	return err
}

// handle routes one request by its first path segment.
func (s *Server) handle(ctx *fasthttp.RequestCtx) {
	// A request with a large body holds more Ps (sched.ProcBoost) and a lent
	// body buffer from its headers (headerReceived); see handled.
	defer func() { s.takeLarge(ctx).handled(s, ctx) }()
	start := time.Now()
	first, rest := splitFirstSegment(ctx.URI().PathOriginal())
	switch string(first) {
	case "healthz":
		s.serveHealthz(ctx)
		return
	case "readyz":
		s.serveReadyz(ctx)
		return
	case "metrics":
		s.metricsHandler(ctx)
		return
	case "api":
		s.api.Serve(ctx, rest)
		s.observeOwn(ctx, "api", start)
		return
	case "admin":
		s.admin.ServeAdmin(ctx, rest)
		s.observeOwn(ctx, "admin", start)
		return
	case "ui":
		s.admin.ServeUI(ctx, rest)
		return
	case "debug":
		s.admin.ServePprof(ctx)
		return
	case "openapi.json":
		serveOpenAPI(ctx)
		return
	}
	up := s.conns[string(first)]
	if up == nil {
		unknownConnection(ctx, rest)
		return
	}
	s.runPipeline(ctx, up, rest)
}

// unknownConnection answers a path whose first segment names no connection.
//
//go:noinline
func unknownConnection(ctx *fasthttp.RequestCtx, rest []byte) {
	apierr.Write(ctx, adapterForPath(rest), apierr.New(apierr.UnknownConnection,
		"No connection is configured under the first path segment of this URL; use /{connection}/... with a name from the config."))
}

// observeOwn records a request to chronicle's own API; a stream (events)
// is recorded when it is answered.
func (s *Server) observeOwn(ctx *fasthttp.RequestCtx, route string, start time.Time) {
	s.metrics.ObserveRequest("", route, ctx.Response.StatusCode(), time.Since(start))
}

// splitFirstSegment splits "/name/rest..." into "name" and "/rest...".
func splitFirstSegment(path []byte) (first, rest []byte) {
	if len(path) > 0 && path[0] == '/' {
		path = path[1:]
	}
	for i, c := range path {
		if c == '/' {
			return path[:i], path[i:]
		}
	}
	return path, nil
}

// adapterForPath guesses the caller's wire format from the path alone, for
// errors that come before a connection is known.
func adapterForPath(path []byte) adapters.Adapter { return formats.ForPath(path) }

// handleParseError answers requests fasthttp could not read: too large a
// body or header block, a read timeout, malformed HTTP.
func (s *Server) handleParseError(ctx *fasthttp.RequestCtx, err error) {
	s.takeLarge(ctx).failed()
	var shape adapters.Adapter = openAIAdapter
	if first, rest := splitFirstSegment(ctx.URI().PathOriginal()); len(first) > 0 {
		if up := s.conns[string(first)]; up != nil {
			shape = up.adapter(rest)
		}
	}
	var small *fasthttp.ErrSmallBuffer
	var netErr net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		apierr.Write(ctx, shape, apierr.New(apierr.BodyTooLarge,
			fmt.Sprintf("The request body is larger than this proxy accepts (limits.max_body_bytes = %d).", s.cfg.Limits.MaxBodyBytes)))
		s.lingerClose(ctx)
	case errors.As(err, &small):
		apierr.Write(ctx, shape, apierr.New(apierr.HeaderTooLarge,
			fmt.Sprintf("The request line and headers are larger than this proxy accepts (limits.max_header_bytes = %d).", s.cfg.Limits.MaxHeaderBytes)))
	case errors.As(err, &netErr) && netErr.Timeout():
		apierr.Write(ctx, shape, apierr.New(apierr.RequestTimeout,
			"The request was not received within limits.read_timeout."))
	default:
		apierr.Write(ctx, shape, apierr.New(apierr.BadRequest,
			"The request could not be parsed as HTTP."))
	}
}

// Bounds of a lingering close (lingerClose): what is read and discarded
// of a refused body at most, and for how long.
const (
	lingerBytes = 64 << 20
	lingerTime  = 10 * time.Second
)

// lingerClose sends the answer in ctx at once, shuts the connection's
// write side and then reads and discards what the client still sends (the
// rest of a body too large to take) until it closes its side, lingerBytes
// were read or lingerTime passed, as nginx's lingering_close does. A
// server that closes with the client's bytes unread resets the
// connection, and a client still writing its body then often never reads
// the answer (ECONNRESET); after a shut write side it reads the answer and
// EOF, and its writes land. The wait holds the connection's goroutine, as
// a slow client would. fasthttp writes ctx's answer once more when this
// returns; the write side is shut, so that write goes nowhere.
func (s *Server) lingerClose(ctx *fasthttp.RequestCtx) {
	c := ctx.Conn()
	hc, ok := c.(interface{ CloseWrite() error })
	if !ok {
		return
	}
	ctx.Response.SetConnectionClose()
	if s.srv.Name != "" {
		ctx.Response.Header.SetServer(s.srv.Name)
	}
	_ = c.SetWriteDeadline(time.Now().Add(s.cfg.Limits.WriteTimeout.D()))
	bw := bufio.NewWriterSize(c, 1024)
	if ctx.Response.Write(bw) != nil || bw.Flush() != nil || hc.CloseWrite() != nil {
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, c, lingerBytes)
}

// fasthttpLogger sends fasthttp's own log lines to slog at debug level,
// with client credentials redacted: a line about a request it could not
// parse quotes parts of that request.
type fasthttpLogger struct{ log *slog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.log.Debug(redactCredentials(fmt.Sprintf(format, args...)), "component", "fasthttp")
}
