package proxy

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/chronicle-proxy/chronicle/adapters"
	"github.com/chronicle-proxy/chronicle/proxy/internal/apierr"
	"github.com/chronicle-proxy/chronicle/repair"
	"github.com/chronicle-proxy/chronicle/store"
	"github.com/valyala/fasthttp"
)

// composeInput is what compose reads: the stored thread and the request.
type composeInput struct {
	ad adapters.Adapter
	// thread is the stored thread, read with the lease (zero when new).
	thread *store.Thread
	// kept is the thread's transcript as the thread cache holds it (nil
	// when there is none or it could not be built). With kept, the
	// messages a request repeats byte for byte are not parsed again:
	// their hashes, tool calls and results come off the cache.
	kept *cachedThread
	// body is the request body; messages its history array (a slice of
	// body); matched what MessagesKnown found of kept in it (zero:
	// unknown); empty that the history is empty (a continue).
	body, messages []byte
	matched        adapters.Prefix
	empty          bool
	mode, model    string
	stream         bool
	// sessionID is the id the upstream's prompt cache is keyed on.
	sessionID string
	// readOnlyTools and expandPreviousResponse are connection config.
	readOnlyTools          []string
	expandPreviousResponse bool
	// buf lends a buffer for an upstream body of n bytes (nil when it is
	// too large to pool: the body is then sent in pieces).
	buf func(n int) []byte
	// hashKey keys the hash of each message for the tenant (encryption at
	// rest, store.HashKeyer); nil when hashes are stored as computed.
	hashKey func(store.Hash) store.Hash
}

// plan is what compose decided for one turn: the upstream body with its
// header edits, the history as it goes upstream (one slice per message,
// with its hash and what the thread cache keeps of it), and what was
// restored and repaired on the way.
type plan struct {
	upstream adapters.Upstream
	// mode is the thread mode the turn is stored under: a Responses
	// request whose previous_response_id was expanded becomes a replace.
	mode string
	// system is the system instruction sent (Gemini), nil for none.
	system []byte

	// hashKey is composeInput's: every hash computed from a message
	// passes through it (keyed), so it compares with the stored ones.
	hashKey      func(store.Hash) store.Hash
	storedHashes []store.Hash  // the thread as loaded, for the transcript diff
	storedMsgs   [][]byte      // its messages, byte for byte as stored
	kept         *cachedThread // the thread cache's copy of them, if any
	// claimed: this turn holds kept's claim (cachedThread.extended), and
	// parts, hashes and infos extend kept's own slices in place.
	claimed bool
	parts   [][]byte // the messages sent upstream, one slice each
	hashes  []store.Hash
	infos   []msgInfo // what compose read of each part, for the thread cache

	// hasCalls: the history makes tool calls; results are the call ids
	// it answers, syntheticResults those whose result repair wrote.
	hasCalls         bool
	results          map[string]bool
	syntheticResults map[string]bool

	edits            []repair.Edit
	interruptedCalls []repair.Call
	restoredFields   []adapters.Restored
}

// compose builds the history the upstream receives: load → restore →
// repair, then the session id and usage options. It reads only its input
// and writes only p: no store, no connection. An error is an *apierr.Error
// or a format error for a body the adapter could not edit.
func compose(in *composeInput, p *plan) error {
	ad, thread, kept := in.ad, in.thread, in.kept
	body, messages, matched := in.body, in.messages, in.matched
	p.mode, p.hashKey = in.mode, in.hashKey
	var err error
	p.storedMsgs, p.storedHashes = thread.Messages, thread.Hashes
	if kept != nil {
		p.storedMsgs, p.storedHashes = kept.msgs, kept.hashes
		p.kept = kept
	}
	// The stored messages as one array, made on first use (append,
	// continue, restore and previous_response_id need it).
	var storedArr []byte
	stored := func() []byte {
		if storedArr == nil {
			if kept != nil {
				storedArr = kept.array()
			} else {
				storedArr = joinArray(p.storedMsgs)
			}
		}
		return storedArr
	}
	if ch, ok := ad.(adapters.Chainer); ok && in.expandPreviousResponse && len(p.storedMsgs) > 0 {
		// A stateless upstream cannot resolve previous_response_id: send
		// the thread's items instead, and the new input after them.
		if expanded, err := ch.ExpandPreviousResponse(body, stored()); err != nil {
			return err
		} else if len(expanded) != len(body) {
			body = expanded
			messages, _ = ad.Messages(body)
			matched = adapters.Prefix{}
			p.mode = modeReplace
		}
	}

	var composed []byte
	switch {
	case in.empty:
		composed = stored()
	case p.mode == modeAppend && len(p.storedMsgs) > 0:
		composed = concatArrays(stored(), messages)
	default:
		composed = messages
	}
	// Gemini's systemInstruction: a request that carries one sets it;
	// append and continue requests without one get the stored one; a
	// replace request without one clears it.
	sys := ad.System(body)
	if sys == nil && (in.empty || p.mode == modeAppend) && thread.System != nil {
		sys = thread.System
		if body, err = ad.SetSystem(body, sys); err != nil {
			return err
		}
	}
	p.system = sys

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
	restorable := kept == nil || kept.restorable
	if len(p.storedMsgs) > 0 && !in.empty && !allKnown && restorable {
		if composed, p.restoredFields, err = ad.Restore(composed, stored(), in.model); err != nil {
			return err
		}
		if len(p.restoredFields) > 0 {
			prefix()
		}
	}

	// Repair, unless the kept skims show there is nothing to repair.
	var tail []byte
	if kept != nil {
		tail = append(append(make([]byte, 0, len(composed)-tailAt+1), '['), composed[tailAt:]...)
	}
	if !validBySkims(ad, kept, known, tail) {
		// Valid: the body was checked whole, or its new messages were
		// (MessagesKnown), and stored messages were valid when written.
		opts := repair.Options{ReadOnlyTools: in.readOnlyTools, Valid: true}
		rep, err := ad.Repair(composed, opts)
		if err != nil {
			return apierr.New(apierr.BadRequest, "The messages array is not a JSON array.")
		}
		p.edits, p.interruptedCalls = rep.Edits, rep.Interrupted
		if rep.Changed {
			composed = rep.Messages
			prefix()
			if kept != nil {
				tail = append(append(tail[:0], '['), composed[tailAt:]...)
			}
		}
	}

	if err := p.split(ad, composed, kept, known, tail); err != nil {
		return err
	}

	if !bytes.Equal(composed, messages) {
		if body, err = ad.SetMessages(body, composed); err != nil {
			return err
		}
	}
	prep := adapters.Prepare{SessionID: in.sessionID, Stream: in.stream, Buf: in.buf(len(body))}
	// A body too large for the pool is not copied to add the session id:
	// it goes upstream in pieces (splicedBody).
	prep.Splice = prep.Buf == nil
	if bytes.Equal(composed, messages) {
		prep.Messages = messages // a slice of body: searches skip it
	}
	p.upstream, err = ad.PrepareUpstream(body, prep)
	return err
}

// split cuts the composed history into messages and hashes them, noting
// the tool calls and results each carries. The first known messages are
// kept's: they come off the cache, and tail (a JSON array of the rest) is
// all that is walked.
func (p *plan) split(ad adapters.Adapter, composed []byte, kept *cachedThread, known int, tail []byte) error {
	seen := func(in msgInfo) {
		p.hasCalls = p.hasCalls || in.calls
		for _, id := range in.results() {
			if p.results == nil {
				p.results = map[string]bool{}
			}
			p.results[id] = true
			if in.synthetic {
				if p.syntheticResults == nil {
					p.syntheticResults = map[string]bool{}
				}
				p.syntheticResults[id] = true
			}
		}
	}
	note := func(in msgInfo) {
		p.infos = append(p.infos, in)
		seen(in)
	}
	walked := composed
	switch {
	case kept != nil && known == len(kept.msgs) && kept.extended.CompareAndSwap(false, true):
		// The whole kept transcript is repeated: this turn claims the
		// entry and appends its messages to the entry's own slices, past
		// their length (no reader of the entry looks there).
		p.claimed = true
		p.parts, p.hashes, p.infos = kept.msgs, kept.hashes, kept.info
		for i := 0; i < known; i++ {
			seen(kept.info[i])
		}
		walked = tail
	case kept != nil:
		// Room for the new messages and the reply, so finish appends
		// without copying.
		room := known + 8
		p.parts, p.hashes, p.infos = make([][]byte, 0, room), make([]store.Hash, 0, room), make([]msgInfo, 0, room)
		p.parts = append(p.parts, kept.msgs[:known]...)
		p.hashes = append(p.hashes, kept.hashes[:known]...)
		for i := 0; i < known; i++ {
			note(kept.info[i])
		}
		walked = tail
	}
	return ad.WalkMessages(walked, func(m adapters.Message) bool {
		p.parts = append(p.parts, m.Raw)
		// A message sent exactly as stored keeps its stored hash: in
		// replace mode most of the history is, and hashing is the costly
		// part of the prefix comparison.
		if i := len(p.hashes); i < len(p.storedMsgs) && bytes.Equal(m.Raw, p.storedMsgs[i]) {
			p.hashes = append(p.hashes, p.storedHashes[i])
		} else {
			// Valid JSON: the body was checked whole, or its new messages
			// were (MessagesKnown), and repair writes valid JSON.
			p.hashes = append(p.hashes, p.keyed(store.Hash(adapters.HashValidMessage(m.Raw))))
		}
		note(infoOf(ad, m))
		return true
	})
}

// keyed is h under the tenant's hash key, when hashes are keyed
// (encryption at rest); h itself otherwise.
func (p *plan) keyed(h store.Hash) store.Hash {
	if p.hashKey != nil {
		return p.hashKey(h)
	}
	return h
}

// writeHeaders tells the client what compose changed: X-Repaired,
// X-Interrupted-Calls and X-Restored.
func (p *plan) writeHeaders(h *fasthttp.ResponseHeader) {
	if len(p.edits) > 0 {
		h.Set("X-Repaired", strconv.Itoa(len(p.edits)))
	}
	if len(p.interruptedCalls) > 0 {
		ids := make([]string, len(p.interruptedCalls))
		for i, c := range p.interruptedCalls {
			ids[i] = c.ID
		}
		h.Set("X-Interrupted-Calls", strings.Join(ids, ","))
	}
	if len(p.restoredFields) > 0 {
		fields := make([]string, len(p.restoredFields))
		for i, r := range p.restoredFields {
			fields[i] = r.Field
		}
		h.Set("X-Restored", strings.Join(fields, ","))
	}
}

// validBySkims reports whether the kept skims of the first known messages
// and the skims of the tail (a JSON array of the rest) show a history that
// repair would leave as it is.
func validBySkims(ad adapters.Adapter, kept *cachedThread, known int, tail []byte) bool {
	if kept == nil {
		return false
	}
	var tailSkims []repair.Skim
	if err := ad.WalkMessages(tail, func(m adapters.Message) bool {
		tailSkims = append(tailSkims, ad.Skim(m.Raw))
		return true
	}); err != nil {
		return false
	}
	return ad.ValidSkimsAt(known+len(tailSkims), func(i int) *repair.Skim {
		if i < known {
			return kept.info[i].skim()
		}
		return &tailSkims[i-known]
	})
}

// sameBytes reports whether a and b are the same slice of the same array.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
