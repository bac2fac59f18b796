package repair

import (
	"testing"

	"github.com/chronicle-proxy/chronicle/adapters/jsonscan"
	"github.com/tidwall/gjson"
)

// FuzzEachElement checks that Each yields the values gjson's
// ForEach does, byte for byte, on every valid JSON value.
func FuzzEachElement(f *testing.F) {
	for _, s := range []string{
		`[]`, `[1,"a",{"b":[2,"]"]},null, true ]`, ` [ "x\"]" , {} ] `,
		`{"a":1,"b":"c"}`, `"text"`, `[[],[[]],{"k":"\\"}]`, `[{"role":"user","content":"hi"}]`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !jsonscan.ValidString(s) {
			// Undefined, but it must end and not panic: repair
			// walks with Options.Valid set.
			Each(gjson.Result{Type: gjson.JSON, Raw: s}, func(gjson.Result) bool { return true })
			return
		}
		arr := gjson.Parse(s)
		var want, got []string
		arr.ForEach(func(_, v gjson.Result) bool {
			want = append(want, v.Raw)
			return true
		})
		Each(arr, func(v gjson.Result) bool {
			got = append(got, v.Raw)
			return true
		})
		if len(got) != len(want) {
			t.Fatalf("%q: got %q, want %q", s, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%q: element %d is %q, want %q", s, i, got[i], want[i])
			}
		}
	})
}
