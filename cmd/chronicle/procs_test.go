package main

import "testing"

func TestPickProcs(t *testing.T) {
	for _, c := range []struct {
		name                     string
		configured, current, cpu int
		env                      bool
		base, boost              int
	}{
		{"default on many CPUs", 0, 8, 8, false, 8, 8},
		{"pinned to one CPU", 0, 1, 1, false, 1, 3},
		{"cgroup limit of one CPU", 0, 1, 4, false, 1, 1},
		{"GOMAXPROCS=1 set by the user", 0, 1, 1, true, 1, 1},
		{"configured", 3, 1, 1, false, 3, 3},
		{"configured wins over the environment", 1, 4, 4, true, 1, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := pickProcs(c.configured, c.current, c.cpu, c.env)
			if got.base != c.base || got.boost != c.boost || got.why == "" {
				t.Fatalf("pickProcs(%d, %d, %d, %v) = %+v, want base %d, boost %d", c.configured, c.current, c.cpu, c.env, got, c.base, c.boost)
			}
		})
	}
}
