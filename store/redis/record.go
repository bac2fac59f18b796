package redisstore

import (
	"strconv"

	"github.com/chronicle-proxy/chronicle/store"
)

// A run's fields that no script reads are kept packed, as one hash field
// each for the start ('s') and the finish ('f'), instead of a field each:
// a field costs the server a lookup in the run's hash on every write, and
// the script an argument, and a finish had fourteen of them. The record
// is a sequence of entries, each a tag byte, the value's length in
// decimal, ':' and the value; it is written and read by this package
// only (the scripts store it as it comes). Fields a later write may change
// (the lease's expiry on renewal, the partial answer) and the ones the
// scripts read (status, lease token, run number, event count, attempt,
// the status before the run) stay fields of their own. Runs written before
// the records have a field for everything; parseRun reads both.
const (
	recModel     = 'm'
	recStarted   = 't'
	recOwner     = 'o'
	recExpires   = 'x'
	recReason    = 'r'
	recFinished  = 'T'
	recError     = 'e'
	recInput     = 'i'
	recOutput    = 'u'
	recCached    = 'c'
	recReasoning = 'g'
	recStatus    = 'h'
	recIntr      = 'I'
	recRepairs   = 'R'
	recRestored  = 'S'
	recSession   = 's'
	// recEnd is the thread's message count after the finish (Run.End):
	// the finish script appends it, as only the script knows it for a
	// finish that writes no transcript.
	recEnd        = 'E'
	recRedactions = 'D'
)

func appendEntry(b []byte, tag byte, v string) []byte {
	b = append(b, tag)
	b = strconv.AppendInt(b, int64(len(v)), 10)
	b = append(b, ':')
	return append(b, v...)
}

func appendEntryBytes(b []byte, tag byte, v []byte) []byte {
	b = append(b, tag)
	b = strconv.AppendInt(b, int64(len(v)), 10)
	b = append(b, ':')
	return append(b, v...)
}

func appendInt(b []byte, tag byte, v int64) []byte {
	var n [20]byte
	return appendEntryBytes(b, tag, strconv.AppendInt(n[:0], v, 10))
}

// startRecord packs what StartRun writes of a run beside its own fields.
func startRecord(model string, started int64, owner string, expires int64) []byte {
	b := make([]byte, 0, 48+len(model)+len(owner))
	b = appendEntry(b, recModel, model)
	b = appendInt(b, recStarted, started)
	b = appendEntry(b, recOwner, owner)
	return appendInt(b, recExpires, expires)
}

// finishRecord packs what Finish writes of a run beside its status, the
// partial answer and the bodies.
func finishRecord(f *store.Finish, now int64) []byte {
	n := 64 + len(f.Reason) + len(f.Model) + len(f.Error) + len(f.InterruptedCalls) + len(f.Repairs) + len(f.Restored) + len(f.Redactions)
	if f.SessionID != nil {
		n += len(*f.SessionID)
	}
	b := make([]byte, 0, n)
	b = appendEntry(b, recReason, f.Reason)
	b = appendInt(b, recFinished, now)
	if f.Error != nil {
		b = appendEntryBytes(b, recError, f.Error)
	}
	if u := f.Usage; u != nil {
		b = appendInt(b, recInput, u.InputTokens)
		b = appendInt(b, recOutput, u.OutputTokens)
		b = appendInt(b, recCached, u.CachedTokens)
		b = appendInt(b, recReasoning, u.ReasoningTokens)
	}
	if f.Model != "" {
		b = appendEntry(b, recModel, f.Model)
	}
	if f.AnswerStatus != 0 {
		b = appendInt(b, recStatus, int64(f.AnswerStatus))
	}
	if f.InterruptedCalls != nil {
		b = appendEntryBytes(b, recIntr, f.InterruptedCalls)
	}
	if f.Repairs != nil {
		b = appendEntryBytes(b, recRepairs, f.Repairs)
	}
	if f.Restored != nil {
		b = appendEntryBytes(b, recRestored, f.Restored)
	}
	if f.SessionID != nil {
		b = appendEntry(b, recSession, *f.SessionID)
	}
	if f.Redactions != nil {
		b = appendEntryBytes(b, recRedactions, f.Redactions)
	}
	return b
}

// eachEntry calls fn for every entry of a record; it stops at the first
// malformed one.
func eachEntry(rec string, fn func(tag byte, v string)) {
	for len(rec) > 0 {
		tag := rec[0]
		i := 1
		n := 0
		for i < len(rec) && rec[i] >= '0' && rec[i] <= '9' && n <= len(rec) { // (n past len(rec) is malformed)
			n = n*10 + int(rec[i]-'0')
			i++
		}
		if i == 1 || i >= len(rec) || rec[i] != ':' || n > len(rec)-i-1 {
			return
		}
		fn(tag, rec[i+1:i+1+n])
		rec = rec[i+1+n:]
	}
}

// applyStartRecord sets the fields a start record holds.
func applyStartRecord(r *store.Run, rec string) {
	eachEntry(rec, func(tag byte, v string) {
		switch tag {
		case recModel:
			r.Model = v
		case recStarted:
			r.StartedAt = fromMS(v)
		case recOwner:
			r.LeaseOwner = v
		case recExpires:
			r.LeaseExpires = fromMS(v)
		}
	})
}

// applyFinishRecord sets the fields a finish record holds.
func applyFinishRecord(r *store.Run, rec string) {
	i64 := func(v string) int64 { n, _ := strconv.ParseInt(v, 10, 64); return n }
	usage := func() *store.Usage {
		if r.Usage == nil {
			r.Usage = &store.Usage{}
		}
		return r.Usage
	}
	eachEntry(rec, func(tag byte, v string) {
		switch tag {
		case recReason:
			r.Reason = v
		case recFinished:
			r.FinishedAt = fromMS(v)
		case recError:
			r.Error = []byte(v)
		case recInput:
			usage().InputTokens = i64(v)
		case recOutput:
			usage().OutputTokens = i64(v)
		case recCached:
			usage().CachedTokens = i64(v)
		case recReasoning:
			usage().ReasoningTokens = i64(v)
		case recModel:
			r.Model = v
		case recStatus:
			r.AnswerStatus = int(i64(v))
		case recIntr:
			r.InterruptedCalls = []byte(v)
		case recRepairs:
			r.Repairs = []byte(v)
		case recRestored:
			r.Restored = []byte(v)
		case recSession:
			s := v
			r.SessionID = &s
		case recEnd:
			r.End = int(i64(v))
		case recRedactions:
			r.Redactions = []byte(v)
		}
	})
}
