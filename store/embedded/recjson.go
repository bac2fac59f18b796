package embedded

import (
	"encoding/base64"
	"encoding/json"
	"strconv"

	"github.com/chronicle-proxy/chronicle/store"
)

// The committer writes a thread meta or run record on every start,
// renewal and finish. encoding/json does it by reflection; these append
// the same bytes directly (TestRecordJSON compares them with
// json.Marshal's on random records), so the format on disk is unchanged
// and any chronicle reads what the other writes.

func appendMetaJSON(b []byte, m *threadMeta) []byte {
	b = append(b, '{')
	b = jInt(b, "c", m.Created)
	b = jInt(b, "u", m.Updated)
	b = jStr(b, "conn", m.Connection)
	b = jStr(b, "fmt", m.Format)
	b = jStr(b, "model", m.Model)
	b = jBytes(b, "sys", m.System)
	b = jInt(b, "v", m.Version)
	b = jStr(b, "lrun", m.LeaseRun)
	b = jStr(b, "lown", m.LeaseOwner)
	b = jInt(b, "ltok", m.LeaseToken)
	b = jInt(b, "lexp", m.LeaseExp)
	b = jInt(b, "lseq", m.LeaseSeq)
	b = jInt(b, "nruns", m.Runs)
	b = jStr(b, "last", string(m.LastStatus))
	b = jKey(b, "usage")
	b = jUsage(b, &m.Usage)
	b = jInt(b, "n", int64(m.Msgs))
	b = jStr(b, "par", m.ForkParent)
	b = jInt(b, "fat", int64(m.ForkAt))
	b = jStr(b, "frun", m.ForkRun)
	b = jStr(b, "dg", m.Digest)
	return append(b, '}')
}

func appendRunJSON(b []byte, r *runRec) []byte {
	b = append(b, '{')
	b = jKey(b, "n")
	b = strconv.AppendInt(b, r.N, 10)
	b = jKey(b, "s")
	b = jString(b, string(r.Status))
	b = jStr(b, "reason", r.Reason)
	b = jStr(b, "model", r.Model)
	b = jKey(b, "st")
	b = strconv.AppendInt(b, r.Started, 10)
	b = jInt(b, "fin", r.Finished)
	if r.Usage != nil {
		b = jKey(b, "usage")
		b = jUsage(b, r.Usage)
	}
	b = jBytes(b, "err", r.Error)
	b = jInt(b, "hs", int64(r.AnswerStatus))
	b = jBytes(b, "ic", r.InterruptedCalls)
	b = jBytes(b, "rep", r.Repairs)
	b = jBytes(b, "rst", r.Restored)
	if r.SessionID != nil {
		b = jKey(b, "sid")
		b = jString(b, *r.SessionID)
	}
	b = jBytes(b, "partial", r.Partial)
	b = jStr(b, "lown", r.LeaseOwner)
	b = jKey(b, "ltok")
	b = strconv.AppendInt(b, r.LeaseToken, 10)
	b = jInt(b, "lexp", r.LeaseExp)
	b = jInt(b, "det", r.Detached)
	if r.Cancel {
		b = jKey(b, "cancel")
		b = append(b, "true"...)
	}
	b = jStr(b, "rby", r.ResumedBy)
	b = jStr(b, "fp", r.Fingerprint)
	b = jInt(b, "ev", r.Events)
	b = jInt(b, "evexp", r.EvExp)
	b = jInt(b, "end", int64(r.End))
	b = jBytes(b, "red", r.Redactions)
	return append(b, '}')
}

// jKey appends "key": after a comma unless the object just opened.
func jKey(b []byte, key string) []byte {
	if b[len(b)-1] != '{' {
		b = append(b, ',')
	}
	b = append(b, '"')
	b = append(b, key...)
	return append(b, '"', ':')
}

// jInt, jStr and jBytes append an omitempty field.
func jInt(b []byte, key string, v int64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(jKey(b, key), v, 10)
}

func jStr(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return jString(jKey(b, key), v)
}

func jBytes(b []byte, key string, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = append(jKey(b, key), '"')
	b = base64.StdEncoding.AppendEncode(b, v)
	return append(b, '"')
}

func jUsage(b []byte, u *store.Usage) []byte {
	b = append(b, `{"InputTokens":`...)
	b = strconv.AppendInt(b, u.InputTokens, 10)
	b = append(b, `,"OutputTokens":`...)
	b = strconv.AppendInt(b, u.OutputTokens, 10)
	b = append(b, `,"CachedTokens":`...)
	b = strconv.AppendInt(b, u.CachedTokens, 10)
	b = append(b, `,"ReasoningTokens":`...)
	b = strconv.AppendInt(b, u.ReasoningTokens, 10)
	return append(b, '}')
}

// jString appends s quoted as encoding/json quotes it: printable ASCII
// other than " \ < > & as it is; anything else through encoding/json.
func jString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
