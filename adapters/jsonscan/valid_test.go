package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{``, false},
		{` `, false},
		{`{}`, true},
		{` [ ] `, true},
		{`{"a":1,"b":[true,false,null],"c":{"d":"e"}}`, true},
		{`{"a":1,}`, false},
		{`[1,]`, false},
		{`[,1]`, false},
		{`{"a" 1}`, false},
		{`{1:2}`, false},
		{`[1 2]`, false},
		{`[1}`, false},
		{`{"a":1]`, false},
		{`[[]`, false},
		{`[]]`, false},
		{`"x" "y"`, false},
		{`-0.5e+10`, true},
		{`01`, false},
		{`-`, false},
		{`1.`, false},
		{`1e`, false},
		{`1.5E-3`, true},
		{`tru`, false},
		{`truex`, false},
		{`nul`, false},
		{`"a\"b\\c\/d\b\f\n\r\t\u00e9"`, true},
		{`"\x"`, false},
		{`"\u12g4"`, false},
		{`"\u12"`, false},
		{"\"tab\there\"", false},
		{"\"\x7f and \xff bytes\"", true},
		{`"` + strings.Repeat("long plain text ", 100) + `"`, true},
		{`"` + strings.Repeat("long plain text ", 100) + "\n" + `"`, false},
		{`"` + strings.Repeat("abcdefg\\\"", 50) + `"`, true},
		{`"unterminated`, false},
		{`"ends in a backslash\`, false},
	} {
		if got := ValidString(tc.in); got != tc.want {
			t.Errorf("Valid(%q) = %v, want %v", clip(tc.in), got, tc.want)
		}
		if got := gjson.Valid(tc.in); got != tc.want {
			t.Errorf("gjson.Valid(%q) = %v: the case is wrong", clip(tc.in), got)
		}
	}
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// TestValidDeep: nesting is bounded, not recursed. gjson.Valid on the 8 MB
// input overflows the goroutine stack and kills the process.
func TestValidDeep(t *testing.T) {
	nest := func(n int) string { return strings.Repeat("[", n) + strings.Repeat("]", n) }
	if !ValidString(nest(MaxDepth)) {
		t.Fatalf("nesting %d deep refused", MaxDepth)
	}
	if ValidString(nest(MaxDepth + 1)) {
		t.Fatalf("nesting %d deep accepted", MaxDepth+1)
	}
	obj := strings.Repeat(`{"a":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth)
	if !ValidString(obj) {
		t.Fatal("objects nested MaxDepth deep refused")
	}
	if ValidString(strings.Repeat("[", 8<<20)) {
		t.Fatal("8 MB of '[' accepted")
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range []string{`{"a":[1,2,{"b":"c\n"}],"d":-1.5e3}`, `[]`, `"\u00e9"`, `[1,]`, `{"a":tru}`, "\"a\x01\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := ValidString(s)
		if want := gjson.Valid(s); got != want {
			t.Fatalf("Valid(%q) = %v, gjson.Valid %v", s, got, want)
		}
		// Valid JSON to encoding/json too (which also checks UTF-8).
		if got && !json.Valid([]byte(s)) && strings.ToValidUTF8(s, "") == s {
			t.Fatalf("Valid(%q) but encoding/json refuses it", s)
		}
	})
}

func BenchmarkValid(b *testing.B) {
	msg := `{"role":"user","content":"` + strings.Repeat("Some message text, with punctuation: and \\\"quotes\\\" now and then.\\n", 4000) + `"}`
	body := []byte(`{"model":"gpt-4o","messages":[` + strings.Repeat(msg+",", 9) + msg + `]}`)
	b.Run("jsonscan", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if !Valid(body) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("gjson", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if !gjson.ValidBytes(body) {
				b.Fatal("invalid")
			}
		}
	})
}

// FuzzValidArrayRest checks ValidArrayRest against Valid: s is cut at the
// start of one of its elements (or at its closing bracket), so what comes
// before the cut is '[' and valid elements, and anything t may follow.
func FuzzValidArrayRest(f *testing.F) {
	for _, c := range [][2]string{
		{`[{"a":1}, "b", [2]]`, `]`}, {`[1,2]`, ``}, {`[1, 2]`, `,]`}, {`[ 1 ,2 ]`, ` 3]`},
		{`[[],{}]`, `{"x":"\u00e9"} ]`}, {`[1]`, `] `}, {`["a","b"]`, `"c",,]`},
	} {
		f.Add(c[0], c[1])
	}
	f.Fuzz(func(t *testing.T, s, tail string) {
		arr := gjson.Parse(s)
		if !gjson.Valid(s) || !arr.IsArray() || strings.TrimSpace(s)[0] != '[' {
			return
		}
		var cuts []int
		arr.ForEach(func(_, v gjson.Result) bool {
			if v.Index > 0 {
				cuts = append(cuts, v.Index)
			}
			return true
		})
		cuts = append(cuts, strings.LastIndexByte(s, ']'))
		for _, off := range cuts {
			if !ValidArrayRest([]byte(s), off) {
				t.Fatalf("ValidArrayRest(%q, %d) = false on a valid array", s, off)
			}
			if c := s[off-1]; c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c == '.' {
				// A number or literal right before the cut: tail could
				// lengthen it ("[1" + "0]"), and a cut never falls there
				// (the known messages are objects).
				continue
			}
			b := s[:off] + tail
			if got, want := ValidArrayRest([]byte(b), off), ValidString(b); got != want {
				t.Fatalf("ValidArrayRest(%q, %d) = %v, Valid says %v", b, off, got, want)
			}
		}
	})
}

// FuzzValidExcept checks ValidExcept against Valid: around a valid array,
// object or string v, anything may come, and skipping v changes nothing.
func FuzzValidExcept(f *testing.F) {
	for _, c := range [][3]string{
		{`{"model":"m","messages":`, `[{"role":"user","content":"hi"}]`, `}`},
		{`{"messages":`, `[]`, `,"model":}`},
		{`{"a":"`, `[1]`, `"}`}, {`[`, `{"k":[2]}`, `,1]`}, {``, `"s"`, ``}, {`{"m":`, `[1]`, `} x`},
	} {
		f.Add(c[0], c[1], c[2])
	}
	f.Fuzz(func(t *testing.T, prefix, v, suffix string) {
		if !ValidString(v) || (v[0] != '[' && v[0] != '{' && v[0] != '"') || v[len(v)-1] != ']' && v[len(v)-1] != '}' && v[len(v)-1] != '"' {
			return
		}
		b := []byte(prefix + v + suffix)
		if got, want := ValidExcept(b, len(prefix), len(prefix)+len(v)), Valid(b); got != want {
			t.Fatalf("ValidExcept(%q, %d, %d) = %v, Valid %v", b, len(prefix), len(prefix)+len(v), got, want)
		}
	})
}
