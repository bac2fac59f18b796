package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/repair"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
)

// Thread modes (X-Thread-Mode).
const (
	modeReplace = "replace"
	modeAppend  = "append"
)

// turn is the persistence side of one generate request: the thread lease,
// the history as composed, restored and repaired, and what the run record
// will say. Created per request; used by the handler and then by the
// goroutine that relays the answer, never by both at once.
type turn struct {
	s     *Server
	st    store.Store
	ad    adapters.Adapter
	up    *upstream
	key   store.Key
	runID string
	lease store.Lease
	mode  string
	model string

	storedHashes []store.Hash  // the thread as loaded, for the transcript diff
	storedMsgs   [][]byte      // its messages, byte for byte as stored
	kept         *cachedThread // the thread cache's copy of them, if any
	// claimed: this turn holds kept's claim (cachedThread.extended), and
	// parts, hashes and infos extend kept's own slices in place.
	claimed      bool
	parts        [][]byte // the messages sent upstream, one slice each
	hashes       []store.Hash
	infos        []msgInfo // what compose read of each part, for the thread cache
	system       []byte
	pendingSaved chan bool // the pending-turn write's outcome (streams only)
	pendingOnce  sync.Once
	pendingOK    bool

	sessionID   *string
	repairs     []byte // JSON arrays for the run record
	restored    []byte
	interrupted []byte

	syntheticResults map[string]bool // call ids whose result repair wrote
	resumes          string          // the parked run whose calls this run answers
	resolve          []string        // its interrupts answered by a result
	cancel           []string        // its interrupts repair had to answer

	// threadFound: the thread had a stored transcript when the run
	// started (false on its first turn).
	threadFound bool
	// ownThread: the client named the thread (X-Thread-Id). Without one
	// the session id is the connection's per-model one, so a client that
	// never names threads still keeps its provider cache warm.
	ownThread bool
	// fingerprint is the request's, as StartRun took it (a spooled
	// finish's Rebuild starts the run again with it).
	fingerprint string
	// upstreamBody is kept on the run when the connection audits it.
	upstreamBody []byte

	events *eventLog
	// cancelCtx ends when the run is asked to stop (requestCancel).
	cancelCtx context.Context
	cancelRun context.CancelFunc

	// The lease renewer is a timer, so a streaming run holds no goroutine
	// for it. renewMu guards the timer and renewStopped; renewRun lets one
	// renewal run at a time; stopRenew cancels the one in flight.
	renewMu      sync.Mutex
	renewTimer   *time.Timer
	renewStopped bool
	renewRun     sync.Mutex
	renewCtx     context.Context
	stopRenew    context.CancelFunc

	// patch carries a run patch (partial snapshot, detached_since) from the
	// relay to the lease renewer, which writes it at once.
	patchMu sync.Mutex
	patch   store.RunPatch
}

// offerPatch hands the renewer a patch to write now; a newer one replaces
// an older one not yet written. It never blocks the relay.
func (t *turn) offerPatch(apply func(p *store.RunPatch)) {
	t.patchMu.Lock()
	apply(&t.patch)
	t.patchMu.Unlock()
	t.renewMu.Lock()
	if t.renewTimer != nil && !t.renewStopped {
		t.renewTimer.Reset(0)
	}
	t.renewMu.Unlock()
}

func (t *turn) takePatch() store.RunPatch {
	t.patchMu.Lock()
	defer t.patchMu.Unlock()
	p := t.patch
	t.patch = store.RunPatch{}
	return p
}

// awaitPending waits for the pending-turn write and reports whether it
// landed. The relay calls it before the first byte goes to the client, so a
// client that saw any of the answer has its input stored; the write ran
// while the upstream worked on its first token, so the wait is usually nil.
func (t *turn) awaitPending() bool {
	t.pendingOnce.Do(func() {
		if t.pendingSaved != nil {
			t.pendingOK = <-t.pendingSaved
		}
	})
	return t.pendingOK
}

// requestCancel asks the relay to stop the run; safe to call many times.
func (t *turn) requestCancel() { t.cancelRun() }

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
		writeError(ctx, ad, apiError{status: 400, code: "invalid_thread_id",
			message: "X-Thread-Id must be 1-128 characters of [A-Za-z0-9._:-]."})
		return nil, nil, false
	}
	runID := ctx.Request.Header.Peek("X-Run-Id")
	if len(runID) == 0 {
		runID = []byte(newID("run_"))
	} else if !validID(runID) {
		writeError(ctx, ad, apiError{status: 400, code: "invalid_run_id",
			message: "X-Run-Id must be 1-128 characters of [A-Za-z0-9._:-]."})
		return nil, nil, false
	}
	mode := modeReplace
	switch m := string(ctx.Request.Header.Peek("X-Thread-Mode")); m {
	case "", modeReplace:
	case modeAppend:
		mode = modeAppend
	default:
		writeError(ctx, ad, apiError{status: 400, code: "invalid_thread_mode",
			message: "X-Thread-Mode must be replace or append."})
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
		writeError(ctx, ad, apiError{status: 400, code: "invalid_json",
			message: "The request body is not valid JSON."})
		return nil, nil, false
	}
	if !ok {
		// No history array: a body without one continues the stored
		// thread; one that is not an object, or whose history is not an
		// array, is refused before any run exists.
		if msg := ad.ShapeProblem(body); msg != "" {
			writeError(ctx, ad, apiError{status: 400, code: codeBadRequest, message: msg})
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
		runID: string(runID), mode: mode, model: ex.op.Model, ownThread: ownThread}
	t.cancelCtx, t.cancelRun = context.WithCancel(context.Background())
	rctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
	defer cancel()

	if empty {
		// Continue a stored thread: it must exist, and a refused request
		// creates no run.
		if _, err := s.store.LoadThread(rctx, t.key); errors.Is(err, store.ErrNotFound) {
			writeError(ctx, ad, apiError{status: 404, code: "thread_not_found",
				message: "An empty messages array continues a stored thread, and this X-Thread-Id names none."})
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
		Fingerprint: t.fingerprint, Model: t.model, LoadThread: true, KnownDigest: known,
		// compose takes the stored system blob only into a request that
		// continues or appends and brings none of its own.
		NoSystem: !(empty || mode == modeAppend) || ad.System(body) != nil,
	}
	started, err := s.store.StartRun(rctx, sr)
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
		writeError(ctx, ad, apiError{status: 409, code: "thread_busy", retryAfter: retry,
			message: "Another run is in flight on this thread; retry when it ends."})
		return nil, nil, false
	case errors.Is(err, store.ErrConflict):
		writeError(ctx, ad, apiError{status: 409, code: "run_id_conflict",
			message: "X-Run-Id names a run of another thread, or was used with a different request body."})
		return nil, nil, false
	case errors.Is(err, store.ErrInvalid):
		writeError(ctx, ad, apiError{status: 400, code: codeBadRequest, message: "The thread or run id is not valid."})
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

	out, err = t.compose(rctx, ctx, ex, &started.Thread, kept, body, messages, matched, empty)
	if err == nil && ex.up.cfg.Audit.UpstreamBody {
		// A copy: out may alias the request buffer. Credentials travel in
		// headers, never in this body.
		t.upstreamBody = ex.upstreamBody(out)
	}
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = &apiError{status: 400, code: codeBadRequest, message: "The request body could not be read as this provider's JSON."}
		}
		t.abandon("bad_request")
		writeError(ctx, ad, *ae)
		return nil, nil, false
	}

	// The pending turn, so a crash mid-stream still leaves the input
	// behind. Best effort, and off the request path: the write runs while
	// the upstream thinks, and finish waits for it. A non-stream turn skips
	// it: its whole transcript is written before the client gets a byte,
	// and a client whose request failed sends it again.
	if ex.op.Stream {
		t.pendingSaved = make(chan bool, 1)
		tr := t.transcriptFrom(t.storedHashes, t.parts, t.hashes)
		sctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
		saveAsync(sctx, s.store, t.lease, tr, func(err error) {
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

// saveAsync writes t without the caller waiting: queued on the store when
// it is a store.AsyncSaver, else on a goroutine of its own.
func saveAsync(ctx context.Context, st store.Store, l store.Lease, t store.Transcript, done func(error)) {
	if as, ok := st.(store.AsyncSaver); ok {
		as.SaveTranscriptAsync(ctx, l, t, done)
		return
	}
	go func() { done(st.SaveTranscript(ctx, l, t)) }()
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
		writeError(ctx, ex.ad, apiError{status: 503, code: codeStoreUnavailable, retryAfter: 1,
			message: "The conversation store is unreachable, and this request needs the thread's stored history (X-Thread-Mode: append, or an empty continue), so it was not sent upstream."})
		return nil, nil, false
	}
	if ex.up.cfg.OnStoreError == "pass" {
		s.metrics.countUnpersisted()
		ctx.Response.Header.Set("X-Persisted", "false")
		return nil, body, true
	}
	writeError(ctx, ex.ad, apiError{status: 503, code: "store_unavailable", retryAfter: 1,
		message: "The conversation store is unreachable, so the request was not sent upstream."})
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

// compose builds the history the upstream receives: load → restore →
// repair, then the session id and usage options. It sets the response's
// X-Repaired, X-Interrupted-Calls and X-Restored headers.
// thread is the stored thread, read with the lease (zero when new); kept
// is its transcript as the thread cache holds it (nil when there is none
// or it could not be built). With kept, the messages a request repeats
// byte for byte are not parsed again: compose reads their hashes, tool
// calls and results off the cache and parses only the rest.
// matched is what MessagesKnown found of kept in messages (zero: unknown).
func (t *turn) compose(rctx context.Context, ctx *fasthttp.RequestCtx, ex *exchange, thread *store.Thread, kept *cachedThread, body, messages []byte, matched adapters.Prefix, empty bool) ([]byte, error) {
	ad := t.ad
	var err error
	// The stored messages as one array, made on first use (append,
	// continue, restore and previous_response_id need it).
	var storedArr []byte
	stored := func() []byte {
		if storedArr == nil {
			if kept != nil {
				storedArr = kept.array()
			} else {
				storedArr = joinArray(thread.Messages)
			}
		}
		return storedArr
	}
	if kept != nil {
		thread.Messages, thread.Hashes = kept.msgs, kept.hashes
		t.kept = kept
	}
	t.storedHashes, t.storedMsgs = thread.Hashes, thread.Messages
	if ch, ok := ad.(adapters.Chainer); ok && t.up.cfg.ExpandPreviousResponse && len(thread.Messages) > 0 {
		// A stateless upstream cannot resolve previous_response_id: send
		// the thread's items instead, and the new input after them.
		if expanded, err := ch.ExpandPreviousResponse(body, stored()); err != nil {
			return nil, err
		} else if len(expanded) != len(body) {
			body = expanded
			messages, _ = ad.Messages(body)
			matched = adapters.Prefix{}
			t.mode = modeReplace
		}
	}

	// Compose.
	var composed []byte
	switch {
	case empty:
		composed = stored()
	case t.mode == modeAppend && len(thread.Messages) > 0:
		composed = concatArrays(stored(), messages)
	default:
		composed = messages
	}
	// Gemini's systemInstruction: a request that carries one sets it;
	// append and continue requests without one get the stored one; a
	// replace request without one clears it.
	sys := ad.System(body)
	if sys == nil && (empty || t.mode == modeAppend) && thread.System != nil {
		sys = thread.System
		if body, err = ad.SetSystem(body, sys); err != nil {
			return nil, err
		}
	}
	t.system = sys

	// The leading messages the request repeats byte for byte from the
	// kept transcript (none without one).
	known, tailAt := 0, 0
	prefix := func() {
		if kept != nil {
			if matched.Known > 0 && sameBytes(composed, messages) {
				known, tailAt = matched.Known, matched.TailAt
			} else {
				known, tailAt = adapters.KnownPrefix(composed, kept.msgs)
			}
			if tailAt == 0 {
				kept = nil // not an array: the full path reports it
			}
		}
	}
	prefix()
	allKnown := kept != nil && tailAt < len(composed) && composed[tailAt] == ']'

	// Restore fields the client dropped, from the stored thread. A
	// history repeated byte for byte has dropped nothing.
	var restoredList []adapters.Restored
	restorable := kept == nil || kept.restorable
	if len(thread.Messages) > 0 && !empty && !allKnown && restorable {
		if composed, restoredList, err = ad.Restore(composed, stored(), t.model); err != nil {
			return nil, err
		}
		if len(restoredList) > 0 {
			prefix()
		}
	}

	// Repair, unless the kept skims show there is nothing to repair.
	var tail []byte
	if kept != nil {
		tail = append(append(make([]byte, 0, len(composed)-tailAt+1), '['), composed[tailAt:]...)
	}
	rep := repair.Result{Messages: composed}
	if !t.validBySkims(kept, known, tail) {
		// Valid: the body was checked whole, or its new messages were
		// (MessagesKnown), and stored messages were valid when written.
		opts := repair.Options{ReadOnlyTools: t.up.cfg.ReadOnlyTools, Valid: true}
		rep, err = ad.Repair(composed, opts)
		if err != nil {
			return nil, &apiError{status: 400, code: codeBadRequest, message: "The messages array is not a JSON array."}
		}
		if rep.Changed {
			composed = rep.Messages
			prefix()
			if kept != nil {
				tail = append(append(tail[:0], '['), composed[tailAt:]...)
			}
		}
	}

	// Split into messages and hash them, and find the parked run whose
	// calls this history answers. Known messages come off the cache.
	hasCalls := false
	var results map[string]bool
	seen := func(in msgInfo) {
		hasCalls = hasCalls || in.calls
		for _, id := range in.results() {
			if results == nil {
				results = map[string]bool{}
			}
			results[id] = true
			if in.synthetic {
				if t.syntheticResults == nil {
					t.syntheticResults = map[string]bool{}
				}
				t.syntheticResults[id] = true
			}
		}
	}
	note := func(in msgInfo) {
		t.infos = append(t.infos, in)
		seen(in)
	}
	walked := composed
	switch {
	case kept != nil && known == len(kept.msgs) && kept.extended.CompareAndSwap(false, true):
		// The whole kept transcript is repeated: this turn claims the
		// entry and appends its messages to the entry's own slices, past
		// their length (no reader of the entry looks there).
		t.claimed = true
		t.parts, t.hashes, t.infos = kept.msgs, kept.hashes, kept.info
		for i := 0; i < known; i++ {
			seen(kept.info[i])
		}
		walked = tail
	case kept != nil:
		// Room for the new messages and the reply, so finish appends
		// without copying.
		room := known + 8
		t.parts, t.hashes, t.infos = make([][]byte, 0, room), make([]store.Hash, 0, room), make([]msgInfo, 0, room)
		t.parts = append(t.parts, kept.msgs[:known]...)
		t.hashes = append(t.hashes, kept.hashes[:known]...)
		for i := 0; i < known; i++ {
			note(kept.info[i])
		}
		walked = tail
	}
	err = ad.WalkMessages(walked, func(m adapters.Message) bool {
		t.parts = append(t.parts, m.Raw)
		// A message sent exactly as stored keeps its stored hash: in
		// replace mode most of the history is, and hashing is the costly
		// part of the prefix comparison.
		if i := len(t.hashes); i < len(thread.Messages) && bytes.Equal(m.Raw, thread.Messages[i]) {
			t.hashes = append(t.hashes, thread.Hashes[i])
		} else {
			// Valid JSON: the body was checked whole, or its new messages
			// were (MessagesKnown), and repair writes valid JSON.
			t.hashes = append(t.hashes, store.Hash(adapters.HashValidMessage(m.Raw)))
		}
		note(infoOf(t.ad, m))
		return true
	})
	if err != nil {
		return nil, err
	}
	if hasCalls {
		t.findParked(rctx, results, rep.Interrupted)
	}

	if !bytes.Equal(composed, messages) {
		if body, err = ad.SetMessages(body, composed); err != nil {
			return nil, err
		}
	}
	sid := threadSessionID(t.key.Tenant, t.key.Thread)
	if !t.ownThread {
		sid = t.s.instanceSessionID(rctx, t.up.cfg.Name, t.model)
	}
	prep := adapters.Prepare{SessionID: sid, Stream: ex.op.Stream, Buf: ex.upstreamBuf(len(body))}
	// A body too large for the pool is not copied to add the session id:
	// it goes upstream in pieces (splicedBody).
	prep.Splice = prep.Buf == nil
	if bytes.Equal(composed, messages) {
		prep.Messages = messages // a slice of body: searches skip it
	}
	up, err := ad.PrepareUpstream(body, prep)
	if err != nil {
		return nil, err
	}
	ex.extraHeaders = up.Headers
	ex.upInsert, ex.upAt = up.Insert, up.At
	if up.SessionID != "" {
		sid := up.SessionID
		t.sessionID = &sid
	}
	ex.addedUsage = up.AddedUsage

	// Audit ledger entries and response headers.
	t.repairs = appendEdits(nil, rep.Edits)
	t.interrupted = appendCalls(nil, rep.Interrupted)
	t.restored = appendRestored(nil, restoredList)
	if len(rep.Edits) > 0 {
		ctx.Response.Header.Set("X-Repaired", strconv.Itoa(len(rep.Edits)))
	}
	if len(rep.Interrupted) > 0 {
		ids := make([]string, len(rep.Interrupted))
		for i, c := range rep.Interrupted {
			ids[i] = c.ID
		}
		ctx.Response.Header.Set("X-Interrupted-Calls", strings.Join(ids, ","))
	}
	if len(restoredList) > 0 {
		fields := make([]string, len(restoredList))
		for i, r := range restoredList {
			fields[i] = r.Field
		}
		ctx.Response.Header.Set("X-Restored", strings.Join(fields, ","))
	}
	return up.Body, nil
}

// validBySkims reports whether the kept skims of the first known messages
// and the skims of the tail (a JSON array of the rest) show a history that
// repair would leave as it is.
func (t *turn) validBySkims(kept *cachedThread, known int, tail []byte) bool {
	if kept == nil {
		return false
	}
	var tailSkims []repair.Skim
	if err := t.ad.WalkMessages(tail, func(m adapters.Message) bool {
		tailSkims = append(tailSkims, t.ad.Skim(m.Raw))
		return true
	}); err != nil {
		return false
	}
	return t.ad.ValidSkimsAt(known+len(tailSkims), func(i int) *repair.Skim {
		if i < known {
			return kept.info[i].skim()
		}
		return &tailSkims[i-known]
	})
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

// transcriptFrom is the write that turns a thread hashed as stored into next.
func (t *turn) transcriptFrom(stored []store.Hash, next [][]byte, hashes []store.Hash) store.Transcript {
	tr := store.Diff(stored, next, hashes)
	tr.System = t.system
	tr.Connection = t.up.cfg.Name
	tr.Format = string(t.ad.Format())
	tr.Model = t.model
	return tr
}

// startRenewing renews the lease every third of its TTL while the run
// streams, and notices cancel requests from other replicas.
func (t *turn) startRenewing() {
	t.renewCtx, t.stopRenew = context.WithCancel(context.Background())
	t.renewMu.Lock()
	t.renewTimer = time.AfterFunc(t.s.cfg.Leases.TTL.D()/3, t.renew)
	t.renewMu.Unlock()
}

// renew is one renewal: on the timer, or at once for a patch.
func (t *turn) renew() {
	t.renewRun.Lock()
	defer t.renewRun.Unlock()
	t.renewMu.Lock()
	if t.renewStopped {
		t.renewMu.Unlock()
		return
	}
	t.renewTimer.Reset(t.s.cfg.Leases.TTL.D() / 3)
	t.renewMu.Unlock()
	rctx, c := context.WithTimeout(t.renewCtx, t.s.storeTimeout)
	ren, err := t.st.Renew(rctx, t.lease, t.takePatch())
	c()
	if err != nil {
		if t.renewCtx.Err() == nil {
			t.s.log.Warn("lease renewal failed", "thread", t.key.Thread, "run", t.runID, "err", err)
		}
		return
	}
	if ren.CancelRequested {
		t.requestCancel()
	}
}

// stopRenewing stops the renewer and waits for a renewal in flight.
func (t *turn) stopRenewing() {
	if t.stopRenew != nil {
		t.renewMu.Lock()
		t.renewStopped = true
		t.renewTimer.Stop()
		t.renewMu.Unlock()
		t.stopRenew()
		// A renewal in flight (its store call now cancelled) ends first.
		t.renewRun.Lock()
		t.renewRun.Unlock()
		t.stopRenew = nil
	}
}

// abandon ends a run that never reached the upstream.
func (t *turn) abandon(reason string) {
	t.stopRenewing()
	t.s.local.Delete(localKey(t.key, t.runID))
	rctx, cancel := context.WithTimeout(context.Background(), t.s.storeTimeout)
	defer cancel()
	if err := t.st.Finish(rctx, t.lease, &store.Finish{Status: store.Failed, Reason: reason}); err != nil {
		t.s.log.Warn("ending an abandoned run failed", "run", t.runID, "err", err)
	}
}

// outcome is how the upstream exchange of a turn ended.
type outcome struct {
	status     int           // upstream HTTP status
	turn       adapters.Turn // assembled answer (when the upstream answered 2xx)
	errBody    []byte        // upstream error body
	reason     string        // chronicle's reason for a failure or abort
	aborted    bool          // the client left (on_disconnect: abort) or a cancel
	retryAfter time.Duration // the upstream\'s Retry-After, for the key pool
	response   []byte        // non-stream body, for idempotent replay
}

// finish records the run's end: the transcript (what was sent plus the
// reply, when the reply is whole) and the status, as one atomic step.
//
// It runs on the connection's goroutine, under a stream's relay, with the
// store's round trip below it: finishRecord builds the record in a frame
// that is gone before the round trip (see docs/design.md, an open
// stream's stack).
func (t *turn) finish(o *outcome) error {
	t.stopRenewing()
	// Wait for the pending-turn write (long done by now), so it cannot land
	// after the run's end, and so the transcript write knows what is stored.
	pendingSaved := t.awaitPending()
	defer t.s.local.Delete(localKey(t.key, t.runID))
	fr := t.finishRecord(o, pendingSaved)
	rctx, cancel := context.WithTimeout(context.Background(), t.s.storeTimeout)
	defer cancel()
	if err := t.st.Finish(rctx, t.lease, &fr.f); err != nil {
		t.finishFailed(fr.f.Status, err)
		return err
	}
	if len(fr.tail.events) > 0 {
		t.s.metrics.eventLogLag.Observe(time.Since(fr.tail.queuedAt).Seconds())
	}
	t.keepTranscript(fr.parts, fr.hashes, fr.replies, pendingSaved)
	t.s.metrics.runs(fr.f.Status)
	return nil
}

// finishing is a finish as finishRecord builds it.
type finishing struct {
	f       store.Finish
	tr      store.Transcript
	rebuild store.Rebuild
	tail    eventTail
	// The transcript the finish writes, for the thread cache.
	parts, replies [][]byte
	hashes         []store.Hash
}

// finishRecord builds the run's end record from the outcome.
//
//go:noinline
func (t *turn) finishRecord(o *outcome, pendingSaved bool) *finishing {
	fr := &finishing{}
	if t.events != nil {
		fr.tail = t.events.close()
	}
	f := &fr.f
	// Field by field: a composite literal is built in the frame first.
	f.EventsFrom, f.Events = fr.tail.first, fr.tail.events
	f.Response, f.UpstreamBody = o.response, t.upstreamBody
	f.AnswerStatus = o.status
	f.Repairs, f.Restored, f.InterruptedCalls = t.repairs, t.restored, t.interrupted
	f.SessionID, f.Model = t.sessionID, t.model
	f.Resolve, f.Cancel, f.Resumes = t.resolve, t.cancel, t.resumes
	if u := o.turn.Usage; u.Present {
		f.Usage = &store.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, CachedTokens: u.CachedTokens, ReasoningTokens: u.ReasoningTokens}
	}
	switch {
	case o.aborted:
		f.Status, f.Reason = store.Aborted, o.reason
	case o.status >= 300:
		f.Status, f.Reason, f.Error = store.Failed, o.reason, o.errBody
		if f.Reason == "" {
			f.Reason = "upstream_error"
		}
	case o.reason != "":
		f.Status, f.Reason, f.Error = store.Failed, o.reason, o.turn.Error
	case !o.turn.Terminal:
		f.Status, f.Reason = store.Failed, codeStreamTruncated
	case o.turn.Error != nil || o.turn.Finish == adapters.FinishError:
		f.Status, f.Reason, f.Error = store.Failed, "upstream_error", o.turn.Error
	default:
		f.Status = store.Completed
		if o.turn.Finish == adapters.FinishToolCalls && len(o.turn.ToolCalls) > 0 {
			f.Status = store.Interrupted
			for _, c := range o.turn.ToolCalls {
				id := c.ID
				if id == "" {
					id = c.Name
				}
				f.Interrupts = append(f.Interrupts, store.Interrupt{CallID: id, Name: c.Name, Status: store.Pending, RunID: t.runID})
			}
		}
		// Appending past len leaves t.parts and t.hashes (the pending
		// transcript's) as they are; neither is read after finish.
		fr.parts, fr.hashes = t.parts, t.hashes
		fr.replies = t.replyMessages(o.turn.Message)
		for _, m := range fr.replies {
			fr.parts = append(fr.parts, m)
			fr.hashes = append(fr.hashes, store.Hash(adapters.HashMessage(m)))
		}
		if pendingSaved {
			fr.tr = t.transcriptFrom(t.hashes, fr.parts, fr.hashes)
		} else {
			fr.tr = t.transcriptFrom(t.storedHashes, fr.parts, fr.hashes)
		}
		f.Transcript = &fr.tr
	}
	if f.Transcript == nil && !t.threadFound && !pendingSaved {
		// A thread's first run that ends without a reply still makes the
		// thread, holding the input it sent (as a stream's pending turn
		// does), so the run and its error can be read.
		fr.tr = t.transcriptFrom(nil, t.parts, t.hashes)
		f.Transcript = &fr.tr
	}
	if f.Transcript != nil {
		t.setRebuild(fr)
	}
	return fr
}

// setRebuild gives the finish what a spool needs to apply it from nothing
// (store.Rebuild): slices of what the finish writes anyway, no copy.
//
//go:noinline
func (t *turn) setRebuild(fr *finishing) {
	rs := &fr.rebuild.Start
	rs.Key, rs.RunID, rs.Owner, rs.TTL = t.key, t.runID, t.s.replicaID, t.s.cfg.Leases.TTL.D()
	rs.Fingerprint, rs.Model = t.fingerprint, t.model
	parts, hashes := fr.parts, fr.hashes
	if parts == nil {
		parts, hashes = t.parts, t.hashes
	}
	fr.rebuild.Transcript = t.transcriptFrom(nil, parts, hashes)
	fr.f.Rebuild = &fr.rebuild
}

// finishFailed forgets the thread's cached transcript and logs a finish
// that did not land. A function of its own: the logger's call, inlined,
// took 300 bytes of finish's frame, which is on the stack of the finish's
// round trip.
//
//go:noinline
func (t *turn) finishFailed(status store.Status, err error) {
	t.s.threads.drop(t.key)
	t.s.log.Error("finishing a run failed; its turn is not stored", "thread", t.key.Thread, "run", t.runID, "status", status, "err", err)
}

// keepTranscript hands the transcript a finish wrote (parts, with the
// reply messages at their end; nil when it wrote none) to the thread
// cache, which otherwise forgets the thread. The store keeps the stored
// bytes of a message whose hash did not change (a client may re-send it
// formatted differently), so the kept copy takes them too: it is read back
// as the stored thread.
func (t *turn) keepTranscript(parts [][]byte, hashes []store.Hash, replies [][]byte, pendingSaved bool) {
	c := t.s.threads
	if c == nil {
		return
	}
	if parts == nil {
		c.drop(t.key)
		return
	}
	if !t.ownThread {
		// A thread the client did not name was made for this request:
		// most such clients send every request without a thread id, and
		// never come back to it. Keeping it would only push out threads
		// that are continued (and copy its messages for nothing); one
		// that is continued by its returned X-Thread-Id is read from the
		// store on that turn, and kept from then on.
		return
	}
	// The replies are read first and skimmed after the walk, not in its
	// callback: this runs on the connection's goroutine at a stream's end,
	// and the skim below the walk's own frames (gjson's ForEach for
	// Gemini) went past the 8 KiB its stack keeps (docs/design.md).
	var read []adapters.Message
	_ = t.ad.WalkMessages(joinArray(replies), func(m adapters.Message) bool {
		m.Calls, m.Results = slices.Clone(m.Calls), slices.Clone(m.Results) // the walk reuses them
		read = append(read, m)
		return true
	})
	infos := t.infos
	for _, m := range read {
		infos = append(infos, infoOf(t.ad, m))
	}
	if len(infos) != len(parts) {
		c.drop(t.key)
		return
	}
	// What the store kept of the thread as loaded: the pending write's
	// prefix when there was one (the finish then only appended).
	written := hashes
	if pendingSaved {
		written = t.hashes
	}
	k := store.CommonPrefix(t.storedHashes, written)
	c.put(nextCachedThread(t.ad, t.key, t.kept, t.claimed, k, t.storedMsgs, parts, hashes, infos))
}

// replyMessages is the assembled reply as thread messages: one message, or
// for the Responses API, its output items one by one.
func (t *turn) replyMessages(reply []byte) [][]byte {
	return t.ad.ReplyMessages(reply)
}

// joinArray makes a JSON array of raw messages.
func joinArray(msgs [][]byte) []byte {
	n := 2
	for _, m := range msgs {
		n += len(m) + 1
	}
	out := make([]byte, 0, n)
	out = append(out, '[')
	for i, m := range msgs {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m...)
	}
	return append(out, ']')
}

// concatArrays joins two JSON arrays.
func concatArrays(a, b []byte) []byte {
	a, b = bytes.TrimSpace(a), bytes.TrimSpace(b)
	if isEmptyArray(a) {
		return b
	}
	if isEmptyArray(b) {
		return a
	}
	out := make([]byte, 0, len(a)+len(b))
	out = append(out, a[:len(a)-1]...)
	out = append(out, ',')
	return append(out, b[1:]...)
}

func appendEdits(dst []byte, edits []repair.Edit) []byte {
	dst = append(dst, '[')
	for i, e := range edits {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"kind":`...)
		dst = strconv.AppendQuote(dst, e.Kind)
		dst = append(dst, `,"call_id":`...)
		dst = appendNullableString(dst, e.CallID)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

func appendCalls(dst []byte, calls []repair.Call) []byte {
	dst = append(dst, '[')
	for i, c := range calls {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"call_id":`...)
		dst = appendNullableString(dst, c.ID)
		dst = append(dst, `,"name":`...)
		dst = strconv.AppendQuote(dst, c.Name)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

func appendRestored(dst []byte, rs []adapters.Restored) []byte {
	dst = append(dst, '[')
	for i, r := range rs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"field":`...)
		dst = strconv.AppendQuote(dst, r.Field)
		dst = append(dst, `,"message_index":`...)
		dst = strconv.AppendInt(dst, int64(r.MessageIndex), 10)
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

func appendNullableString(dst []byte, s string) []byte {
	if s == "" {
		return append(dst, "null"...)
	}
	return strconv.AppendQuote(dst, s)
}

// answerFromStore answers a retry whose X-Run-Id names an existing run:
// the stored non-stream body, or the stored stream replayed (and followed,
// if the run is still going), with no upstream call.
func (s *Server) answerFromStore(ctx *fasthttp.RequestCtx, ex *exchange, k store.Key, runID string) {
	s.metrics.countReplayed()
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

// sameBytes reports whether a and b are the same slice of the same array.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
