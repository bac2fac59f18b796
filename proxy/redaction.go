package proxy

import (
	"slices"

	"github.com/chronicle-proxy/chronicle/proxy/internal/redact"
	"github.com/chronicle-proxy/chronicle/store"
)

// Redaction (a connection's redact rules, proxy/internal/redact) masks
// what is stored of a turn, never what goes upstream: the messages a
// transcript write stores (the kept prefix is stored masked already),
// the stored answer and upstream body, the event log and the partial
// snapshot. A stored message keeps the hash of the original, so a client
// that sends its whole history again (replace mode) still matches the
// stored prefix; append and continue turns send the stored, masked,
// history. A connection without rules pays a nil check at each of these
// places.

// redactTranscript masks the messages tr writes, counting what was
// masked in c (nil: not counted). tr.Messages aliases the turn's parts,
// which go upstream and to the thread cache, so a masked message goes
// into a copy of the slice.
//
//go:noinline
func (t *turn) redactTranscript(tr *store.Transcript, c *redact.Counts) {
	r := t.up.redact
	var out [][]byte
	for i, m := range tr.Messages {
		red := r.Message(m, c)
		if len(red) == len(m) && (len(m) == 0 || &red[0] == &m[0]) {
			continue
		}
		if out == nil {
			out = slices.Clone(tr.Messages)
		}
		out[i] = red
	}
	if out != nil {
		tr.Messages = out
	}
}

// maskFinish masks the bodies a finish stores (the answer, the
// upstream body, the error) and records what was masked on the run.
//
//go:noinline
func (t *turn) maskFinish(fr *finishing, pendingSaved bool) {
	r := t.up.redact
	f := &fr.f
	if f.Response != nil {
		f.Response = r.Body(f.Response, fr.replies, masked(r, fr.replies))
	}
	if f.UpstreamBody != nil {
		f.UpstreamBody = r.Body(f.UpstreamBody, t.parts, masked(r, t.parts))
	}
	if f.Error != nil {
		f.Error = r.Body(f.Error, nil, nil)
	}
	// The pending write's count holds when it was stored: the finish then
	// wrote only what followed it.
	var c redact.Counts
	if pendingSaved {
		c.Add(&t.redactPending)
	}
	c.Add(&t.redactFinish)
	f.Redactions = r.JSON(&c)
}

func masked(r *redact.Rules, msgs [][]byte) [][]byte {
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		out[i] = r.Message(m, nil)
	}
	return out
}
