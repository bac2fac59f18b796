package rawjson

import (
	"bytes"
	"encoding/json"
	"io/fs"
	"testing"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/fixtures"
	"github.com/tidwall/gjson"
)

func TestInsertAbsentKey(t *testing.T) {
	for _, tc := range []struct {
		body, want string
		ok         bool
	}{
		{`{"model":"m","messages":[]}`, `{"model":"m","messages":[],"k":"v"}`, true},
		{` { } `, ` { "k":"v"} `, true},
		{`{}`, `{"k":"v"}`, true},
		{"{\"a\":1}\n", "{\"a\":1,\"k\":\"v\"}\n", true},
		{`{"k":"x"}`, ``, false},
		{`{"messages":[{"content":"say \"k\""}]}`, `{"messages":[{"content":"say \"k\""}],"k":"v"}`, true},
		{`{"messages":[{"content":"k"}]}`, ``, false},
		{`{"\u006b":"x"}`, ``, false},
		{`{"caf\u00e9":1}`, `{"caf\u00e9":1,"k":"v"}`, true},
		{`[1]`, ``, false},
		{`{"a":1`, ``, false},
	} {
		got, ok := InsertAbsentKey([]byte(tc.body), nil, "k", []byte(`"v"`))
		if ok != tc.ok || string(got) != tc.want {
			t.Errorf("insertAbsentKey(%s) = %s, %v; want %s, %v", tc.body, got, ok, tc.want, tc.ok)
		}
	}
}

// ModelAndStream reads what gjson reads.
func checkModelAndStream(t *testing.T, body []byte) {
	t.Helper()
	model, stream := ModelAndStream(body)
	if want := gjson.GetBytes(body, "model").String(); model != want {
		t.Fatalf("model of %s = %q, gjson says %q", body, model, want)
	}
	if want := gjson.GetBytes(body, "stream").Bool(); stream != want {
		t.Fatalf("stream of %s = %v, gjson says %v", body, stream, want)
	}
}

func TestModelAndStream(t *testing.T) {
	for _, b := range []string{
		`{"model":"gpt-4o","messages":[{"role":"user","content":"x \"stream\":true"}],"stream":true}`,
		`{"messages":[],"model":"m\u00e9","stream":false}`,
		`{"stream":"true","model":1}`,
		`{"stream":true,"stream":false,"model":"a","model":"b"}`,
		`{"str\u0065am":true}`,
		`{}`,
		`{"model":null}`,
		`[]`,
		`{"a":{"stream":true},"b":[{"model":"x"}]}`,
	} {
		checkModelAndStream(t, []byte(b))
	}
}

func FuzzModelAndStream(f *testing.F) {
	f.Add([]byte(`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	f.Add([]byte(`{"stream":1,"model":"\"m\""}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if gjson.ValidBytes(body) {
			checkModelAndStream(t, body)
		}
	})
}

// FuzzRawScanner checks the hot-path scanner agrees with gjson on valid
// objects and never panics on anything.
func FuzzRawScanner(f *testing.F) {
	f.Add(`{"a": "x\"y", "b" :[1,{"c":null}], "d":true ,"e":-1.5e3}`)
	f.Add(`[1, "2", [3], {"4":4}]`)
	f.Add(`{"a":`)
	f.Fuzz(func(t *testing.T, s string) {
		var keys, vals []string
		EachMember(s, func(k, v string) bool {
			keys, vals = append(keys, k), append(vals, v)
			return true
		})
		EachElement(s, func(string) bool { return true })
		if !gjson.Valid(s) {
			return
		}
		r := gjson.Parse(s)
		if !r.IsObject() {
			return
		}
		i := 0
		r.ForEach(func(k, v gjson.Result) bool {
			if i >= len(keys) || keys[i] != k.Raw || vals[i] != v.Raw {
				t.Fatalf("member %d: scanner %q=%q, gjson %q=%q", i, keys, vals, k.Raw, v.Raw)
			}
			i++
			return true
		})
		if i != len(keys) {
			t.Fatalf("scanner saw %d members, gjson %d", len(keys), i)
		}
	})
}

// FuzzCompactJSON checks Compact against encoding/json's Compact on
// valid JSON.
func FuzzCompactJSON(f *testing.F) {
	f.Add(fixture(f, "openai-chat/text.json"))
	f.Add([]byte(" { \"a\" : [ 1 , \"b \\\" c\" , { } ] ,\n\t\"d\":null } "))
	f.Fuzz(func(t *testing.T, src []byte) {
		var want bytes.Buffer
		if json.Compact(&want, src) != nil {
			return
		}
		if got := Compact(nil, src); !bytes.Equal(got, want.Bytes()) {
			t.Fatalf("compactJSON(%q) = %q, want %q", src, got, want.Bytes())
		}
	})
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(fixtures.FS, "providers/"+name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
