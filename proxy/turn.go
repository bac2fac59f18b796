package proxy

import (
	"context"
	"sync"
	"time"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/proxy/internal/redact"
	"github.com/chronicle-proxy/chronicle/store"
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
	// subject is X-Chronicle-Subject: whom the turn is about, kept with
	// the thread for erasure by subject ("" when none).
	subject string

	// plan is what compose decided: the history as sent, and what was
	// restored and repaired.
	plan
	pendingSaved chan bool // the pending-turn write's outcome (streams only)
	pendingOnce  sync.Once
	pendingOK    bool

	sessionID   *string
	repairs     []byte // JSON arrays for the run record
	restored    []byte
	interrupted []byte

	resumes string   // the parked run whose calls this run answers
	resolve []string // its interrupts answered by a result
	cancel  []string // its interrupts repair had to answer

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
	// What the connection's redaction masked in the pending write and in
	// the finish's (redaction.go).
	redactPending, redactFinish redact.Counts

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
