package repair

import (
	"fmt"
	"strings"
	"testing"
)

func benchRepair(b *testing.B, fn repairFunc, in []byte, wantChanged bool) {
	opts := Options{ReadOnlyTools: []string{"get_weather"}}
	r, err := fn(in, opts)
	if err != nil || r.Changed != wantChanged {
		b.Fatalf("Changed = %v, err %v", r.Changed, err)
	}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		fn(in, opts)
	}
}

// TestCleanHistoryAllocs guards the fast path: a 500-message history with
// no defect is checked without a single allocation.
func TestCleanHistoryAllocs(t *testing.T) {
	for _, c := range []struct {
		name string
		fn   repairFunc
		in   []byte
	}{{"responses", Responses, responses500(false)}} {
		if n := strings.Count(string(c.in), `"role"`) + strings.Count(string(c.in), `"type":"function_call`) + strings.Count(string(c.in), `"type":"reasoning"`); n != 500 && n != 497 {
			t.Fatalf("%s: %d messages, want 500", c.name, n)
		}
		var r Result
		allocs := testing.AllocsPerRun(20, func() { r, _ = c.fn(c.in, Options{}) })
		if r.Changed || allocs != 0 {
			t.Errorf("%s: Changed = %v, %v allocs per run, want unchanged and 0", c.name, r.Changed, allocs)
		}
	}
}

// TestDefectHistories checks the 500-message defect histories like any other.
func TestDefectHistories(t *testing.T) {
	checkProperties(t, Responses, checkResponsesValid, responses500(true), Options{})
	checkProperties(t, Responses, checkResponsesValid, responses500(false), Options{})
}

// responses500 is history500 for Responses input items (reasoning, two
// calls, two outputs, a reply, a user message per exchange).
func responses500(defects bool) []byte {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < 71; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"message","role":"user","content":[{"type":"input_text","text":"Weather in city %d and its neighbour?"}]},`, i)
		fmt.Fprintf(&b, `{"type":"reasoning","id":"rs_%d","encrypted_content":"gAAAAB","summary":[]},`, i)
		fmt.Fprintf(&b, `{"type":"function_call","call_id":"call_%da","name":"get_weather","arguments":"{\"city\":\"c%d\"}"},{"type":"function_call","call_id":"call_%db","name":"get_weather","arguments":"{\"city\":\"n%d\"}"},`, i, i, i, i)
		fmt.Fprintf(&b, `{"type":"function_call_output","call_id":"call_%da","output":"{\"temp_c\":%d}"},`, i, i%30)
		if defects {
			fmt.Fprintf(&b, `{"type":"message","role":"assistant","content":[]},{"type":"function_call_output","call_id":"orphan_%d","output":"late"}`, i)
		} else {
			fmt.Fprintf(&b, `{"type":"function_call_output","call_id":"call_%db","output":"{\"temp_c\":%d}"},`, i, i%25)
			fmt.Fprintf(&b, `{"type":"message","role":"assistant","content":[{"type":"output_text","text":"City %d is fine."}]}`, i)
		}
	}
	b.WriteByte(']')
	return []byte(b.String())
}

func BenchmarkResponses500Clean(b *testing.B)   { benchRepair(b, Responses, responses500(false), false) }
func BenchmarkResponses500Defects(b *testing.B) { benchRepair(b, Responses, responses500(true), true) }
