package redisstore

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chronicle-proxy/chronicle/store"
)

// A run written with the records reads back as the fields it was written
// with; a sweep's or a renewal's fields override the start record, and
// the finish record overrides both.
func TestRecordsRoundTrip(t *testing.T) {
	k := store.Key{Tenant: "t", Thread: "h"}
	sid := "sess:1"
	f := &store.Finish{Status: store.Failed, Reason: "upstream_error", Error: []byte(`{"error":"x:1"}`),
		Usage: &store.Usage{InputTokens: 10, OutputTokens: 20, CachedTokens: 3, ReasoningTokens: 4}, Model: "m-2",
		AnswerStatus: 502, InterruptedCalls: []byte(`[]`), Repairs: []byte(`["a"]`), Restored: []byte{}, SessionID: &sid}
	started, fin := int64(1_700_000_000_000), int64(1_700_000_001_234)
	h := map[string]string{"st": "failed", "fp": "fp1", "ltok": "7", "n": "3", "att": "x", "plast": "completed",
		"s": string(startRecord("m-1", started, "replica:1", started+30000)), "f": string(finishRecord(f, fin)), "resp": "body"}
	got := parseRun(k, "r1", h)
	want := store.Run{ID: "r1", Key: k, Status: store.Failed, Reason: "upstream_error", Model: "m-2",
		StartedAt: time.UnixMilli(started).UTC(), FinishedAt: time.UnixMilli(fin).UTC(), Error: f.Error,
		Usage: f.Usage, AnswerStatus: 502, InterruptedCalls: []byte(`[]`), Repairs: []byte(`["a"]`), Restored: []byte{},
		SessionID: &sid, Interrupts: []store.Interrupt{}, LeaseOwner: "replica:1", LeaseToken: 7,
		LeaseExpires: time.UnixMilli(started + 30000).UTC(), Fingerprint: "fp1", Response: []byte("body")}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("run (-want +got):\n%s", d)
	}

	// A running run renewed, then swept: no finish record.
	h = map[string]string{"st": "failed", "ltok": "7", "s": string(startRecord("m-1", started, "o", started+30000)),
		"lexp": strconv.FormatInt(started+60000, 10), "reason": "proxy_lost", "fin": strconv.FormatInt(fin, 10)}
	got = parseRun(k, "r1", h)
	if got.Model != "m-1" || !got.LeaseExpires.Equal(time.UnixMilli(started+60000)) || got.Reason != "proxy_lost" ||
		!got.FinishedAt.Equal(time.UnixMilli(fin)) || got.Usage != nil || got.SessionID != nil || got.Error != nil {
		t.Fatalf("swept run read as %+v", got)
	}

	// A finish without usage, error or session id records none.
	got = parseRun(k, "r1", map[string]string{"st": "completed", "f": string(finishRecord(&store.Finish{Status: store.Completed}, fin))})
	if got.Usage != nil || got.SessionID != nil || got.Error != nil || got.InterruptedCalls != nil || got.Model != "" || got.AnswerStatus != 0 {
		t.Fatalf("bare finish read as %+v", got)
	}
}

// eachEntry stops at the first malformed entry and never reads past the
// record.
func TestEachEntryMalformed(t *testing.T) {
	for _, tc := range []struct {
		rec  string
		want []string
	}{
		{"", nil},
		{"a1:xb0:", []string{"a=x", "b="}},
		{"a3:xy", nil},                  // length past the end
		{"a1:xb", []string{"a=x"}},      // no length
		{"a1:xb2x:yy", []string{"a=x"}}, // no colon
		{"a99999999999999999999:x", nil},
	} {
		var got []string
		eachEntry(tc.rec, func(tag byte, v string) { got = append(got, string(tag)+"="+v) })
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%q (-want +got):\n%s", tc.rec, d)
		}
	}
}

func FuzzEachEntry(f *testing.F) {
	f.Add(string(finishRecord(&store.Finish{Reason: "r", Error: []byte("e"), Usage: &store.Usage{InputTokens: 1}}, 5)))
	f.Add(string(startRecord("m", 1, "o", 2)))
	f.Add("a1:xb")
	f.Fuzz(func(t *testing.T, rec string) {
		n := 0
		eachEntry(rec, func(tag byte, v string) { n += 1 + len(v) })
		if n > len(rec) {
			t.Fatalf("read %d bytes of a %d-byte record", n, len(rec))
		}
		var r store.Run
		applyFinishRecord(&r, rec)
		applyStartRecord(&r, rec)
	})
}
