package embedded

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/chronicle-proxy/chronicle/store"
)

// TestRecordJSON: the committer's encoders write what json.Marshal does
// for any meta or run record, and roundTrips holds only of records that
// decode back to equal themselves.
func TestRecordJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	strs := []string{"", "gpt-4o", "replica-a", `quo"te`, `back\slash`, "<html>&", "tab\tnew\nline", "\x00\x1f", "ünï€😀", "bad\xff\xfeutf8", "\u2028\u2029", "del\x7f"}
	str := func() string { return strs[rng.IntN(len(strs))] }
	num := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return -rng.Int64N(1 << 40)
		}
		return rng.Int64N(1 << 62)
	}
	bs := func() []byte {
		switch rng.IntN(4) {
		case 0:
			return nil
		case 1:
			return []byte{}
		}
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.IntN(256))
		}
		return b
	}
	usage := func() store.Usage {
		return store.Usage{InputTokens: num(), OutputTokens: num(), CachedTokens: num(), ReasoningTokens: num()}
	}
	check := func(what string, got, v any, rt bool) {
		t.Helper()
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.([]byte), want) {
			t.Fatalf("%s:\n got %s\nwant %s", what, got, want)
		}
		back := reflect.New(reflect.TypeOf(v).Elem())
		if err := json.Unmarshal(want, back.Interface()); err != nil {
			t.Fatal(err)
		}
		if eq := reflect.DeepEqual(back.Interface(), v); rt && !eq {
			t.Fatalf("%s: roundTrips, but decodes to %+v, not %+v", what, back.Elem(), v)
		}
	}
	for range 3000 {
		m := &threadMeta{Created: num(), Updated: num(), Connection: str(), Format: str(), Model: str(), System: bs(),
			Version: num(), LeaseRun: str(), LeaseOwner: str(), LeaseToken: num(), LeaseExp: num(), LeaseSeq: num(),
			Runs: num(), LastStatus: store.Status(str()), Usage: usage(), Msgs: int(num()), ForkParent: str(), ForkAt: int(num()), ForkRun: str(), Digest: str()}
		check("meta", appendMetaJSON(nil, m), m, roundTrips(m))
		r := &runRec{N: num(), Status: store.Status(str()), Reason: str(), Model: str(), Started: num(), Finished: num(),
			Error: bs(), AnswerStatus: int(num()), InterruptedCalls: bs(), Repairs: bs(), Restored: bs(), Partial: bs(),
			LeaseOwner: str(), LeaseToken: num(), LeaseExp: num(), Detached: num(), Cancel: rng.IntN(2) == 0,
			ResumedBy: str(), Fingerprint: str(), Events: num(), EvExp: num(), End: int(num()), Redactions: bs()}
		if rng.IntN(2) == 0 {
			u := usage()
			r.Usage = &u
		}
		if rng.IntN(2) == 0 {
			sid := str()
			r.SessionID = &sid
		}
		check("run", appendRunJSON(nil, r), r, roundTrips(r))
	}
	check("zero meta", appendMetaJSON(nil, &threadMeta{}), &threadMeta{}, true)
	check("zero run", appendRunJSON(nil, &runRec{}), &runRec{}, true)
}

// BenchmarkRecordJSON: a turn's meta and run record (as a finish leaves
// them) written by encoding/json and by the committer's encoders, and
// decoded.
func BenchmarkRecordJSON(b *testing.B) {
	sid := "sess-1"
	m := &threadMeta{Created: 1765000000000, Updated: 1765000001000, Connection: "openai", Format: "openai-chat", Model: "gpt-4o",
		Version: 120, LeaseSeq: 121, Runs: 121, LastStatus: store.Completed, Usage: store.Usage{InputTokens: 12000, OutputTokens: 3400}, Msgs: 2}
	r := &runRec{N: 121, Status: store.Completed, Model: "gpt-4o", Started: 1765000000000, Finished: 1765000001000,
		Usage: &store.Usage{InputTokens: 10, OutputTokens: 20}, AnswerStatus: 200, SessionID: &sid, LeaseOwner: "replica-a",
		LeaseToken: 121, LeaseExp: 1765000030000, Fingerprint: "3f2a9c0d1e", EvExp: 1765086401000, End: 2}
	mj, _ := json.Marshal(m)
	rj, _ := json.Marshal(r)
	b.Run("Marshal", func(b *testing.B) {
		for b.Loop() {
			json.Marshal(m)
			json.Marshal(r)
		}
	})
	b.Run("Append", func(b *testing.B) {
		for b.Loop() {
			appendMetaJSON(make([]byte, 0, 256), m)
			appendRunJSON(make([]byte, 0, 256), r)
		}
	})
	b.Run("Unmarshal", func(b *testing.B) {
		for b.Loop() {
			var m threadMeta
			var r runRec
			json.Unmarshal(mj, &m)
			json.Unmarshal(rj, &r)
		}
	})
}
