package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"time"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/repair"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
)

// Starting a turn runs on a kept goroutine of s.starters (sched.Starters):
// it goes deep (compose, repair, StartRun's round trip: 9 to 11 KiB below
// fasthttp's frames), and the connection's goroutine, which a stream then
// parks for its whole life, keeps the stack it grew to.
const maxIdleStarters = 32

// startCall and startDone are beginTurn's arguments and results, as
// s.starters passes them by value.
type startCall struct {
	ctx  *fasthttp.RequestCtx
	ex   *exchange
	body []byte
}

type startDone struct {
	t   *turn
	out []byte
	ok  bool
}

// beginOffStack is beginTurn run by one of s.starters. Out of line: the
// hand-off's values stay out of runPipeline's frame.
//
//go:noinline
func (s *Server) beginOffStack(ctx *fasthttp.RequestCtx, ex *exchange, body []byte) (*turn, []byte, bool) {
	d := s.starters.Run(startCall{ctx, ex, body})
	return d.t, d.out, d.ok
}

// startTurn is beginTurn for s.starters.
func (s *Server) startTurn(c startCall) startDone {
	t, out, ok := s.beginTurn(c.ctx, c.ex, c.body)
	return startDone{t, out, ok}
}

// beginTurn takes the thread lease, composes the history the upstream will
// receive and returns the body to send. It answers the request itself (and
// returns ok=false) when the request is refused or answered from the store.
// persisted=false means the store was unreachable and on_store_error is
// pass: forward without persisting.
func (s *Server) beginTurn(ctx *fasthttp.RequestCtx, ex *exchange, body []byte) (t *turn, out []byte, ok bool) {
	ad := ex.ad
	threadID := ctx.Request.Header.Peek("X-Thread-Id")
	ownThread := len(threadID) > 0
	if !ownThread {
		threadID = []byte(newID("thr_"))
	} else if !validID(threadID) {
		apierr.Write(ctx, ad, apierr.New(apierr.InvalidThreadID,
			"X-Thread-Id must be 1-128 characters of [A-Za-z0-9._:-]."))
		return nil, nil, false
	}
	runID := ctx.Request.Header.Peek("X-Run-Id")
	freshRunID := len(runID) == 0
	if freshRunID {
		runID = []byte(newID("run_"))
	} else if !validID(runID) {
		apierr.Write(ctx, ad, apierr.New(apierr.InvalidRunID,
			"X-Run-Id must be 1-128 characters of [A-Za-z0-9._:-]."))
		return nil, nil, false
	}
	subject := ctx.Request.Header.Peek("X-Chronicle-Subject")
	if len(subject) > 0 && store.ValidSubject(string(subject)) != nil {
		apierr.Write(ctx, ad, apierr.New(apierr.InvalidSubject,
			"X-Chronicle-Subject must be 1-256 printable ASCII characters without spaces, '{' or '}'."))
		return nil, nil, false
	}
	mode := modeReplace
	switch m := string(ctx.Request.Header.Peek("X-Thread-Mode")); m {
	case "", modeReplace:
	case modeAppend:
		mode = modeAppend
	default:
		apierr.Write(ctx, ad, apierr.New(apierr.InvalidThreadMode,
			"X-Thread-Mode must be replace or append."))
		return nil, nil, false
	}
	// The transcript this replica kept for the thread, if any: messages
	// the request repeats from it are neither validated nor parsed again.
	kept := s.threads.get(store.Key{Tenant: ex.tenant, Thread: string(threadID)}, ad.Format())
	var knownMsgs [][]byte
	if kept != nil {
		knownMsgs = kept.msgs
	}
	// The messages array was checked by MessagesKnown (its known
	// elements were when stored); the rest of the body is checked here,
	// so nothing that is not JSON goes upstream or into a run.
	messages, matched, ok := ad.MessagesKnown(body, knownMsgs)
	if ok && !adapters.ValidAround(body, messages) || !ok && !jsonscan.Valid(body) {
		// Refused before any run exists: nothing is stored for it.
		apierr.Write(ctx, ad, apierr.New(apierr.InvalidJSON,
			"The request body is not valid JSON."))
		return nil, nil, false
	}
	if !ok {
		// No history array: a body without one continues the stored
		// thread; one that is not an object, or whose history is not an
		// array, is refused before any run exists.
		if msg := ad.ShapeProblem(body); msg != "" {
			apierr.Write(ctx, ad, apierr.New(apierr.BadRequest,
				msg))
			return nil, nil, false
		}
	}
	if status, refusal, refused := adapters.MissingModel(ad, ex.op.Model); refused {
		// The provider's own answer, without a run or a round trip.
		ctx.SetStatusCode(status)
		ctx.SetContentType("application/json")
		ctx.SetBody(refusal)
		return nil, nil, false
	}
	empty := isEmptyArray(messages)

	t = &turn{s: s, st: s.store, ad: ad, up: ex.up, key: store.Key{Tenant: ex.tenant, Thread: string(threadID)},
		runID: string(runID), mode: mode, model: ex.op.Model, ownThread: ownThread, subject: string(subject)}
	if ex.span != nil {
		t.st = tracedStore{Store: s.store, ex: ex}
	}
	t.cancelCtx, t.cancelRun = context.WithCancel(context.Background())
	rctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	defer cancel()

	if empty {
		// Continue a stored thread: it must exist, and a refused request
		// creates no run.
		if _, err := s.store.LoadThread(rctx, t.key); errors.Is(err, store.ErrNotFound) {
			apierr.Write(ctx, ad, apierr.New(apierr.ThreadNotFound,
				"An empty messages array continues a stored thread, and this X-Thread-Id names none."))
			return nil, nil, false
		} else if err != nil {
			return s.storeFailed(ctx, ex, err, body, true)
		}
	}

	var known string
	if kept != nil {
		known = kept.digest
	}
	t.fingerprint = fingerprint(body)
	sr := store.StartRun{
		Key: t.key, RunID: t.runID, Owner: s.replicaID, TTL: s.cfg.Leases.TTL.D(),
		Fingerprint: t.fingerprint, Model: t.model, LoadThread: true, KnownDigest: known, Subject: t.subject,
		// The id is ours, drawn for this request: the store need not check
		// that no run has it (a client's X-Run-Id may name one).
		FreshRunID: freshRunID,
		// compose takes the stored system blob only into a request that
		// continues or appends and brings none of its own.
		NoSystem: !(empty || mode == modeAppend) || ad.System(body) != nil,
	}
	var hashKey func(store.Hash) store.Hash
	if s.hashKeys != nil {
		// Encryption at rest: the tenant's message hashes are keyed.
		var err error
		if hashKey, err = s.hashKeys.HashKey(rctx, t.key.Tenant); err != nil {
			if errors.Is(err, store.ErrUnavailable) {
				return s.storeFailed(ctx, ex, err, body, empty || mode == modeAppend)
			}
			// Not an outage that passes: retrying will not help, and
			// on_store_error: pass would forward this tenant's every
			// request unstored.
			s.log.Error("the tenant's encryption keys do not open", "connection", ex.up.cfg.Name, "err", err)
			apierr.Write(ctx, ad, apierr.New(apierr.InternalError,
				"The conversation store cannot open this tenant's encryption keys, so the request was not sent upstream; the proxy's log says why."))
			return nil, nil, false
		}
	}
	sp := ex.storeSpan("start_run")
	started, err := s.store.StartRun(rctx, sr)
	endStoreSpan(sp, err)
	needsHistory := empty || mode == modeAppend
	if err != nil && errors.Is(err, store.ErrUnavailable) && !needsHistory && ex.up.cfg.OnStoreError == "pass" {
		// The store is away, and the request carries the whole
		// conversation: with a spool, the run starts in the journal and
		// its turn is kept all the same.
		if off, ok := s.backend().(offlineStarter); ok {
			if st, oerr := off.StartOffline(rctx, sr); oerr == nil {
				s.log.Warn("store unavailable at run start; the run is kept in the spool", "connection", ex.up.cfg.Name, "err", err)
				started, err = st, nil
			}
		}
	}
	switch {
	case errors.Is(err, store.ErrLeaseHeld):
		retry := int(time.Until(started.Lease.Expires).Seconds()) + 1
		if retry < 1 {
			retry = 1
		}
		apierr.Write(ctx, ad, apierr.Retry(apierr.ThreadBusy, retry,
			"Another run is in flight on this thread; retry when it ends."))
		return nil, nil, false
	case errors.Is(err, store.ErrConflict):
		apierr.Write(ctx, ad, apierr.New(apierr.RunIDConflict,
			"X-Run-Id names a run of another thread, or was used with a different request body."))
		return nil, nil, false
	case errors.Is(err, store.ErrInvalid):
		apierr.Write(ctx, ad, apierr.New(apierr.BadRequest,
			"The thread or run id is not valid."))
		return nil, nil, false
	case err != nil:
		return s.storeFailed(ctx, ex, err, body, needsHistory)
	}
	ctx.Response.Header.Set("X-Thread-Id", t.key.Thread)
	ctx.Response.Header.Set("X-Run-Id", t.runID)
	if !started.Created {
		s.answerFromStore(ctx, ex, t.key, started.Run.ID)
		return nil, nil, false
	}
	t.lease = started.Lease
	t.threadFound = started.ThreadFound
	if started.ThreadFound {
		s.threads.counted(started.Unchanged && kept != nil)
	}
	keptBefore := kept
	switch {
	case started.Unchanged && kept != nil:
	case started.ThreadFound && s.threads != nil:
		kept = threadFromStore(ad, started.Thread)
	default:
		kept = nil
	}
	if kept != keptBefore {
		matched = adapters.Prefix{} // MessagesKnown matched another transcript
	}

	sid := threadSessionID(t.key.Tenant, t.key.Thread)
	if !ownThread {
		sid = s.instanceSessionID(rctx, ex.up.cfg.Name, t.model)
	}
	in := composeInput{ad: ad, thread: &started.Thread, kept: kept, body: body, messages: messages,
		matched: matched, empty: empty, mode: mode, model: t.model, stream: ex.op.Stream, sessionID: sid,
		readOnlyTools: ex.up.cfg.ReadOnlyTools, expandPreviousResponse: ex.up.cfg.ExpandPreviousResponse,
		buf: ex.upstreamBuf, hashKey: hashKey}
	if err = compose(&in, &t.plan); err == nil {
		out = t.adopt(rctx, ctx, ex)
	}
	if err == nil && ex.up.cfg.Audit.UpstreamBody {
		// A copy: out may alias the request buffer. Credentials travel in
		// headers, never in this body.
		t.upstreamBody = ex.upstreamBody(out)
	}
	if err != nil {
		t.abandon("bad_request")
		apierr.Write(ctx, ad, apierr.As(err, apierr.New(apierr.BadRequest, "The request body could not be read as this provider's JSON.")))
		return nil, nil, false
	}

	// The pending turn, so a crash mid-stream still leaves the input
	// behind. Best effort, and off the request path: the write runs while
	// the upstream thinks, and finish waits for it. A non-stream turn skips
	// it: its whole transcript is written before the client gets a byte,
	// and a client whose request failed sends it again.
	if ex.op.Stream {
		t.pendingSaved = make(chan bool, 1)
		tr := t.transcriptFrom(t.storedHashes, t.parts, t.hashes, &t.redactPending)
		sctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
		store.SaveAsync(sctx, s.store, t.lease, tr, func(err error) {
			cancel()
			if err != nil {
				s.log.Warn("saving the pending turn failed", "thread", t.key.Thread, "err", err)
			}
			t.pendingSaved <- err == nil
		})
	}
	t.startRenewing()
	s.local.Store(localKey(t.key, t.runID), t)
	return t, out, true
}

// offlineStarter is a store that can start a run while its backend is
// unreachable (store/spool).
type offlineStarter interface {
	StartOffline(ctx context.Context, r store.StartRun) (*store.Started, error)
}

// storeFailed applies on_store_error when the store cannot be reached at a
// run's start: fail answers 503, pass forwards without persisting, unless
// the request needs the stored history (append, an empty continue): sent
// without it, the upstream would answer a conversation the client never
// had, so that is a 503 too.
func (s *Server) storeFailed(ctx *fasthttp.RequestCtx, ex *exchange, err error, body []byte, needsHistory bool) (*turn, []byte, bool) {
	s.log.Warn("store unavailable at run start", "connection", ex.up.cfg.Name, "err", err)
	if ex.up.cfg.OnStoreError == "pass" && needsHistory {
		apierr.Write(ctx, ex.ad, apierr.Retry(apierr.StoreUnavailable, 1,
			"The conversation store is unreachable, and this request needs the thread's stored history (X-Thread-Mode: append, or an empty continue), so it was not sent upstream."))
		return nil, nil, false
	}
	if ex.up.cfg.OnStoreError == "pass" {
		s.metrics.CountUnpersisted()
		ctx.Response.Header.Set("X-Persisted", "false")
		return nil, body, true
	}
	apierr.Write(ctx, ex.ad, apierr.Retry(apierr.StoreUnavailable, 1,
		"The conversation store is unreachable, so the request was not sent upstream."))
	return nil, nil, false
}

// isEmptyArray reports whether raw is absent or a JSON array with no element.
func isEmptyArray(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return true
	}
	if raw[0] != '[' {
		return false
	}
	return len(bytes.TrimSpace(raw[1:len(raw)-1])) == 0
}

// adopt takes compose's plan: the run record's ledger, the upstream
// request's edits, the response headers, and the parked run this turn
// resumes. It returns the body to send.
func (t *turn) adopt(rctx context.Context, ctx *fasthttp.RequestCtx, ex *exchange) []byte {
	p := &t.plan
	t.mode = p.mode
	if p.hasCalls {
		t.findParked(rctx, p.results, p.interruptedCalls)
	}
	ex.prepared = p.upstream
	ex.prepared.Body = nil // the body travels on its own (out)
	if p.upstream.SessionID != "" {
		sid := p.upstream.SessionID
		t.sessionID = &sid
	}
	t.repairs = appendEdits(nil, p.edits)
	t.interrupted = appendCalls(nil, p.interruptedCalls)
	t.restored = appendRestored(nil, p.restoredFields)
	p.writeHeaders(&ctx.Response.Header)
	return p.upstream.Body
}

// findParked looks for the run this request resumes: the newest run that
// parked as interrupted and was never resumed. Its pending calls are
// resolved when the history now carries their results and cancelled when
// repair had to answer them (or the thread moved on without them). Only a
// history that makes tool calls can have one (the caller checks), so other
// threads pay no extra store round trip.
func (t *turn) findParked(rctx context.Context, results map[string]bool, repaired []repair.Call) {
	runs, err := t.st.ListRuns(rctx, t.key)
	if err != nil {
		return
	}
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		if r.Status != store.Interrupted || r.ResumedBy != "" {
			continue
		}
		for _, in := range r.Interrupts {
			if in.Status != store.Pending {
				continue
			}
			if results[in.CallID] && !repairedCall(repaired, in.CallID) && !t.synthetic(in.CallID) {
				t.resolve = append(t.resolve, in.CallID)
			} else {
				t.cancel = append(t.cancel, in.CallID)
			}
		}
		t.resumes = r.ID
		return
	}
}

// synthetic reports whether the history's result for a call is one that
// repair wrote on an earlier turn (the thread moved on without the real one).
func (t *turn) synthetic(callID string) bool {
	return t.syntheticResults[callID]
}

func repairedCall(calls []repair.Call, id string) bool {
	for _, c := range calls {
		if c.ID == id {
			return true
		}
	}
	return false
}

// answerFromStore answers a retry whose X-Run-Id names an existing run:
// the stored non-stream body, or the stored stream replayed (and followed,
// if the run is still going), with no upstream call.
func (s *Server) answerFromStore(ctx *fasthttp.RequestCtx, ex *exchange, k store.Key, runID string) {
	s.metrics.CountReplayed()
	if !ex.op.Stream {
		// StartRun reports the run without its stored body; fetch it.
		rctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
		run, err := s.store.GetRun(rctx, k, runID)
		cancel()
		if err != nil {
			s.storeError(ctx, err, "run")
			return
		}
		if !run.Status.Ended() {
			// forward waits for its end, once the request's admission
			// is given back (answerWhenEnded).
			ex.awaitRun = &store.RunRef{Key: k, RunID: runID}
			return
		}
		answerEnded(ctx, ex.ad, &run)
		return
	}
	if s.answeredBeforeEvents(ctx, ex, k, runID) {
		return
	}
	ctx.SetStatusCode(200)
	ctx.SetContentType("text/event-stream")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	ctx.Response.ImmediateHeaderFlush = true
	conn, ad := ctx.Conn(), ex.ad
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		s.streamEvents(w, conn, k, runID, 0, false, ad)
	})
}

// instanceSessionID is the stable session id of (connection, model) for
// requests that name no thread. It is kept in the store, so it survives
// restarts and is shared by replicas; a local cache spares the round trip.
func (s *Server) instanceSessionID(rctx context.Context, connection, model string) string {
	key := connection + "\x00" + model
	if v, ok := s.sessionIDs.Load(key); ok {
		return v.(string)
	}
	id, err := s.store.SessionID(rctx, connection, model, newID("chr-"))
	if err != nil {
		// Not worth failing a request over: a fresh id only costs a
		// cache miss upstream.
		s.log.Warn("loading the instance session id failed", "connection", connection, "err", err)
		return threadSessionID(connection, model)
	}
	s.sessionIDs.Store(key, id)
	return id
}
