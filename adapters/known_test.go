package adapters

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/chronicle-proxy/chronicle/adapters/rawjson"
)

func TestKnownPrefix(t *testing.T) {
	known := [][]byte{[]byte(`{"a":1}`), []byte(`{"b":[1,2]}`), []byte(`"s"`)}
	for _, tc := range []struct {
		arr      string
		k        int
		restFrom string // the array from the offset returned
	}{
		{`[]`, 0, `]`},
		{`[{"a":1},{"b":[1,2]},"s"]`, 3, `]`},
		{` [ {"a":1} , {"b":[1,2]} ,"s" ] `, 3, `] `},
		{`[{"a":1},{"b":[1,2]},"s",{"c":3}]`, 3, `{"c":3}]`},
		{`[{"a":1},{"b":[1,2,3]},"s"]`, 1, `{"b":[1,2,3]},"s"]`},
		{`[{"a":1}]`, 1, `]`},
		{`[{"a":1 },{"b":[1,2]}]`, 0, `{"a":1 },{"b":[1,2]}]`},
		{`[{"a":12}]`, 0, `{"a":12}]`},
		{`["s"]`, 0, `"s"]`},
		{`{"a":1}`, 0, `{"a":1}`},
	} {
		k, off := KnownPrefix([]byte(tc.arr), known)
		if k != tc.k || tc.arr[off:] != tc.restFrom {
			t.Errorf("KnownPrefix(%s) = %d, %q; want %d, %q", tc.arr, k, tc.arr[off:], tc.k, tc.restFrom)
		}
	}
}

func TestValidArraySkipsOnlyKnownElements(t *testing.T) {
	known := [][]byte{[]byte(`{"a":1}`)}
	for _, tc := range []struct {
		arr  string
		want bool
	}{
		{`[{"a":1}]`, true},
		{`[{"a":1},{"b":2}]`, true},
		{`[{"a":1},{"b":}]`, false},
		{`[{"a":1},{"b":2}`, false},
		{`[{"a":1} x]`, false},
		{`[{"a":2},{"b":}]`, false},
		{`[]`, true},
		{`[{"a":1}, ]`, false}, // a trailing comma after the known elements
		{`[{"a":1},{"b":2},]`, false},
		{`[ {"a":1} ,{"b":2} ] `, true},
	} {
		if _, got := ValidArray([]byte(tc.arr), known); got != tc.want {
			t.Errorf("validArray(%s) = %v, want %v", tc.arr, got, tc.want)
		}
	}
}

// A key inside the skipped messages array does not count; one outside does.
func TestInsertAbsentKeySkipsMessages(t *testing.T) {
	body := []byte(`{"messages":[{"content":"\"k\":1 \u006b"}],"model":"m"}`)
	msgs, _, _ := KnownArray(body, "messages", nil)
	got, ok := rawjson.InsertAbsentKey(body, msgs, "k", []byte("1"))
	if !ok || string(got) != `{"messages":[{"content":"\"k\":1 \u006b"}],"model":"m","k":1}` {
		t.Fatalf("got %s, %v", got, ok)
	}
	body = []byte(`{"messages":[],"k":2}`)
	msgs, _, _ = KnownArray(body, "messages", nil)
	if _, ok := rawjson.InsertAbsentKey(body, msgs, "k", []byte("1")); ok {
		t.Fatal("inserted a key the body has")
	}
	// A slice of another buffer is not skipped.
	if _, ok := rawjson.InsertAbsentKey([]byte(`{"k":1}`), []byte(`{"k":1}`), "k", []byte("1")); ok {
		t.Fatal("skipped a foreign slice")
	}
}

// knownArrayAt finds the same array gjson does, for every body the
// table and the fuzzer give, whichever of its leading elements are known.
func checkKnownArrayAt(t *testing.T, body []byte) {
	t.Helper()
	if !gjson.ValidBytes(body) {
		return
	}
	r := gjson.GetBytes(body, "messages")
	var elems [][]byte
	if r.IsArray() {
		r.ForEach(func(_, v gjson.Result) bool {
			elems = append(elems, []byte(v.Raw))
			return true
		})
	}
	// KnownArray without known elements (its walk, or gjson) reads what
	// gjson reads.
	if got, _, ok := KnownArray(body, "messages", nil); ok != r.IsArray() || ok && string(got) != r.Raw {
		t.Fatalf("arrayAt(%s) = %s, %v; gjson finds %s", body, got, ok, r.Raw)
	}
	for k := 0; k <= len(elems); k++ {
		got, p, ok := knownAt(body, "messages", elems[:k])
		if !ok {
			continue // the gjson path answers
		}
		if wk, woff := KnownPrefix(got, elems[:k]); p != (Prefix{Known: wk, TailAt: woff}) {
			t.Fatalf("knownArrayAt(%s, %d known) reports prefix %+v; KnownPrefix of its array is %d, %d", body, k, p, wk, woff)
		}
		if !r.IsArray() || string(got) != r.Raw {
			t.Fatalf("knownArrayAt(%s, %d known) = %s; gjson finds %s", body, k, got, r.Raw)
		}
		if want, _, _ := KnownArray(body, "messages", nil); string(want) != string(got) {
			t.Fatalf("arrayAt differs with and without known elements: %s vs %s", got, want)
		}
	}
}

// knownAt is knownArrayAt for the array at the top-level key, as KnownArray
// finds it.
func knownAt(body []byte, key string, known [][]byte) ([]byte, Prefix, bool) {
	start, ok := rawjson.TopLevelValue(body, key)
	if !ok || start >= len(body) || body[start] != '[' {
		return nil, Prefix{}, false
	}
	return knownArrayAt(body, start, known)
}

// ValidAround on the array KnownArray finds answers what Valid answers for
// the whole body, valid or not.
func checkValidAround(t *testing.T, body []byte) {
	t.Helper()
	arr, _, ok := KnownArray(body, "messages", nil)
	if !ok {
		return
	}
	if got, want := ValidAround(body, arr), jsonscan.Valid(body); got != want {
		t.Fatalf("ValidAround(%s) = %v, Valid %v", body, got, want)
	}
}

// InsertAbsentKeys adds members only where gjson finds none of their
// keys, keeps every other top-level member as gjson reads it, and builds
// in dst when dst has the room.
func checkInsertAbsentKeys(t *testing.T, body []byte) {
	t.Helper()
	if !gjson.ValidBytes(body) {
		return
	}
	msgs, _, _ := KnownArray(body, "messages", nil)
	dst := make([]byte, 0, len(body)+64)
	members := []rawjson.Pair{{Key: "k1", Value: []byte("1")}, {Key: "stream_options", Value: []byte(`{"x":"y"}`)}}
	out, ok := rawjson.InsertAbsentKeys(dst, body, msgs, members...)
	// Splicing decides the same and sends the same bytes, without a copy.
	insert, at, spliced := rawjson.SpliceAbsentKeys(body, msgs, members...)
	if spliced != ok {
		t.Fatalf("spliceAbsentKeys(%s) reports %v, insertAbsentKeys %v", body, spliced, ok)
	}
	if joined := (Upstream{Body: body, Insert: insert, At: at}).Bytes(); ok && !bytes.Equal(joined, out) {
		t.Fatalf("spliceAbsentKeys(%s) sends %s, insertAbsentKeys %s", body, joined, out)
	}
	if !ok {
		return
	}
	if gjson.GetBytes(body, "k1").Exists() || gjson.GetBytes(body, "stream_options").Exists() {
		t.Fatalf("insertAbsentKeys(%s) added a key the body has: %s", body, out)
	}
	if !gjson.ValidBytes(out) || gjson.GetBytes(out, "k1").Raw != "1" || gjson.GetBytes(out, "stream_options.x").Str != "y" {
		t.Fatalf("insertAbsentKeys(%s) = %s", body, out)
	}
	var before, after []string
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool { before = append(before, k.Raw+":"+v.Raw); return true })
	gjson.ParseBytes(out).ForEach(func(k, v gjson.Result) bool { after = append(after, k.Raw+":"+v.Raw); return true })
	if len(after) != len(before)+2 || strings.Join(after[:len(before)], ",") != strings.Join(before, ",") {
		t.Fatalf("insertAbsentKeys(%s) = %s: members changed", body, out)
	}
	if &out[0] != &dst[:1][0] {
		t.Fatalf("insertAbsentKeys(%s) did not build in dst (cap %d, needs %d)", body, cap(dst), len(out))
	}
}

func TestInsertAbsentKeys(t *testing.T) {
	for _, b := range []string{
		`{"model":"m","messages":[{"role":"user","content":"\"k1\" stream_options"}]}`,
		` {"messages":[]} `,
		`{}`,
		`{"k1":2,"messages":[]}`,
		`{"messages":[],"stream_options":{"include_usage":false}}`,
	} {
		checkInsertAbsentKeys(t, []byte(b))
	}
	// A key inside a string counts unless the string is in the skipped
	// messages.
	out, ok := rawjson.InsertAbsentKeys(nil, []byte(`{"messages":[{"c":"\"k1"}]}`), nil, rawjson.Pair{Key: "k1", Value: []byte("1")})
	if ok {
		t.Fatalf("a key inside an unskipped string was taken as absent: %s", out)
	}
	body := []byte(`{"messages":[{"c":"\"k1"}] }`)
	msgs, _, _ := KnownArray(body, "messages", nil)
	out, ok = rawjson.InsertAbsentKeys(nil, body, msgs, rawjson.Pair{Key: "k1", Value: []byte("1")}, rawjson.Pair{Key: "k2", Value: []byte("2")})
	if !ok || string(out) != `{"messages":[{"c":"\"k1"}] ,"k1":1,"k2":2}` {
		t.Fatalf("got %s, %v", out, ok)
	}
	if _, ok := rawjson.InsertAbsentKeys(nil, body, msgs, rawjson.Pair{Key: "k1", Value: []byte("1")}, rawjson.Pair{Key: "k2", Value: nil}); ok {
		t.Fatal("a nil value was added")
	}
}

func TestKnownArrayAt(t *testing.T) {
	for _, b := range []string{
		`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b \"]\" \\"}],"stream":false}`,
		`{"a":{"messages":[1]},"messages":[ {"x":[1,{"y":"]"}]} , "s", 3, true, null ],"b":[1,2]}`,
		`{"messages":[],"messages":[1]}`,
		`{"n":-1.5e3,"t":true,"messages":[{"k":"v"}]}`,
		`{"m\u0065ssages":[1],"messages":[2]}`,
		`{"messages":"text"}`,
		`[1,2]`,
		`{"messages":[{"type":"message","role":"user","content":"hi"},{"role":"assistant","content":[{"type":"output_text","text":""},{"type":"refusal","refusal":"no"}]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"},{"type":"reasoning","summary":[]},{"type":"custom_tool_call","call_id":7},{"type":"x\u0079"},{"content":[{"type":"input_image"},"s",{"text":""}],"role":"user"},{"type":1}]}`,
		`{"messages":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"text":"","thought":true},{"text":"t","thought":"true"},{"functionCall":{"id":"c1","name":"f","args":{}}},{"functionCall":{"name":"g"}}]},{"role":"user","parts":{"a":{"functionResponse":{"id":"c1","name":"f","response":{}}}}},{"r\u006fle":"model","parts":[{"text":"x","thought":0},{"text":"\"q\""},"s",null]},{"parts":null},{"parts":[{"functionCall":"no"},{"functionResponse":{"name":1}}]}]}`,
	} {
		checkKnownArrayAt(t, []byte(b))
		checkInsertAbsentKeys(t, []byte(b))
	}
	if _, _, ok := knownAt([]byte(`{"messages":[{"a":1},{"b":2}]}`), "messages", [][]byte{[]byte(`{"a":1}`)}); !ok {
		t.Fatal("the fast path did not apply to a plain body")
	}
}

func FuzzKnownArrayAt(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"}]}`))
	f.Add([]byte(`{"messages":[{"x":"\\\""},"s\\\\",[[]]],"z":{"messages":1}}`))
	f.Add([]byte(`{"messages":[{"role":"tool","tool_call_id":"c1","content":""},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","function":{"name":"f"}}]},{"role":"function","name":"g","content":[{"type":"text","text":""}]},1,{"r\u006fle":"user","role":"system","role":"user"}]}`))
	f.Add([]byte(`{"messages":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"text":"","thought":true},{"text":"t","thought":"true"},{"functionCall":{"id":"c1","name":"f","args":{}}},{"functionCall":{"name":"g"}}]},{"role":"user","parts":{"a":{"functionResponse":{"id":"c1","name":"f","response":{}}}}},{"r\u006fle":"model","parts":[{"text":"x","thought":0},{"text":"\"q\""},"s",null]},{"parts":null},{"parts":[{"functionCall":"no"},{"functionResponse":{"name":1}}]}]}`))
	f.Add([]byte(`{"messages":[{"type":"message","role":"user","content":"hi"},{"role":"assistant","content":[{"type":"output_text","text":""},{"type":"refusal","refusal":"no"}]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"ok"},{"type":"reasoning","summary":[]},{"type":"custom_tool_call","call_id":7},{"type":"x\u0079"},{"content":[{"type":"input_image"},"s",{"text":""}],"role":"user"},{"type":1}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		checkValidAround(t, body)
		checkKnownArrayAt(t, body)
		checkInsertAbsentKeys(t, body)
	})
}
