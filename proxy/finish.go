// The finish stage: the run's end written to the store as one atomic step
// (the transcript with the reply, the status, usage and the audit ledger),
// before the answer's end reaches the client.

package proxy

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/proxy/internal/redact"
	"github.com/chronicle-proxy/chronicle/repair"
	"github.com/chronicle-proxy/chronicle/store"
)

// transcriptFrom is the write that turns a thread hashed as stored into next.
// The messages it writes are masked by the connection's redaction, if
// any, counting in c (nil: not counted).
func (t *turn) transcriptFrom(stored []store.Hash, next [][]byte, hashes []store.Hash, c *redact.Counts) store.Transcript {
	tr := store.Diff(stored, next, hashes)
	if t.up.redact != nil {
		t.redactTranscript(&tr, c)
	}
	tr.System = t.system
	tr.Connection = t.up.cfg.Name
	tr.Format = string(t.ad.Format())
	tr.Model = t.model
	return tr
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
// that is gone before the round trip (docs/design.md, "Runtime
// mechanics").
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
		t.s.metrics.EventLogLag.Observe(time.Since(fr.tail.queuedAt).Seconds())
	}
	t.keepTranscript(fr.parts, fr.hashes, fr.replies, pendingSaved)
	t.s.metrics.Runs(fr.f.Status)
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
		f.Status, f.Reason = store.Failed, string(apierr.StreamTruncated)
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
			fr.hashes = append(fr.hashes, t.keyed(store.Hash(adapters.HashMessage(m))))
		}
		if pendingSaved {
			fr.tr = t.transcriptFrom(t.hashes, fr.parts, fr.hashes, &t.redactFinish)
		} else {
			fr.tr = t.transcriptFrom(t.storedHashes, fr.parts, fr.hashes, &t.redactFinish)
		}
		f.Transcript = &fr.tr
	}
	if f.Transcript == nil && !t.threadFound && !pendingSaved {
		// A thread's first run that ends without a reply still makes the
		// thread, holding the input it sent (as a stream's pending turn
		// does), so the run and its error can be read.
		fr.tr = t.transcriptFrom(nil, t.parts, t.hashes, &t.redactFinish)
		f.Transcript = &fr.tr
	}
	if f.Transcript != nil {
		t.setRebuild(fr)
	}
	if t.up.redact != nil {
		t.maskFinish(fr, pendingSaved)
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
	rs.Fingerprint, rs.Model, rs.Subject = t.fingerprint, t.model, t.subject
	parts, hashes := fr.parts, fr.hashes
	if parts == nil {
		parts, hashes = t.parts, t.hashes
	}
	fr.rebuild.Transcript = t.transcriptFrom(nil, parts, hashes, nil)
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
	if parts == nil || t.up.redact != nil {
		// A connection that redacts stores other bytes than it sent: the
		// thread is read from the store, masked, on its next turn.
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
	// Gemini) went past the 8 KiB its stack keeps (docs/design.md, "Runtime mechanics").
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
