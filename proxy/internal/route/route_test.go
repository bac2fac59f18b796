package route

import (
	"reflect"
	"testing"
)

func TestMatch(t *testing.T) {
	r := Route{Method: "GET", Path: "/admin/threads/{tenant}/{thread}/runs/{run}"}
	cases := []struct {
		method string
		parts  []string
		vals   []string
		ok     bool
	}{
		{"GET", []string{"threads", "t1", "th", "runs", "r1"}, []string{"t1", "th", "r1"}, true},
		{"POST", []string{"threads", "t1", "th", "runs", "r1"}, nil, false},
		{"GET", []string{"threads", "t1", "th", "runz", "r1"}, nil, false},
		{"GET", []string{"threads", "t1", "th", "runs"}, nil, false},
		{"GET", []string{"threads", "t1", "th", "runs", "r1", "x"}, nil, false},
		{"GET", []string{""}, nil, false},
	}
	for _, c := range cases {
		vals, ok := r.Match("/admin", c.method, c.parts)
		if ok != c.ok || !reflect.DeepEqual(vals, c.vals) {
			t.Errorf("%s %v: %v %v, want %v %v", c.method, c.parts, vals, ok, c.vals, c.ok)
		}
	}
	if _, ok := (Route{Method: "GET", Path: "/admin/usage"}).Match("/api", "GET", []string{"usage"}); ok {
		t.Error("matched under another prefix")
	}
	if vals, ok := (Route{Method: "GET", Path: "/admin/usage"}).Match("/admin", "GET", []string{"usage"}); !ok || vals != nil {
		t.Errorf("literal route: %v %v", vals, ok)
	}
}
