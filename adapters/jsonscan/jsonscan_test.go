package jsonscan

import "testing"

// stringEndByByte is the plain definition StringEnd must agree with.
func stringEndByByte(s string, i int) int {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

func TestStringEnd(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want int
	}{
		{`""`, 2},
		{`"abc",`, 5},
		{`"a\"b"x`, 6},
		{`"a\\"b"`, 5},
		{`"a\\\"b"`, 8},
		{`"\\\\"`, 6},
		{`"never closed`, -1},
		{`"ends in escape\"`, -1},
	} {
		if got := StringEnd(tc.s, 0); got != tc.want {
			t.Errorf("StringEnd(%q) = %d, want %d", tc.s, got, tc.want)
		}
	}
}

func FuzzStringEnd(f *testing.F) {
	f.Add(`"a\\\"b"tail`)
	f.Add(`"` + "\\\\\\\"" + `x"`)
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) == 0 || s[0] != '"' {
			return
		}
		if got, want := StringEnd(s, 0), stringEndByByte(s, 0); got != want {
			t.Fatalf("StringEnd(%q) = %d, byte by byte %d", s, got, want)
		}
	})
}
