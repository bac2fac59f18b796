package main

import "testing"

func TestPickProcs(t *testing.T) {
	for _, c := range []struct {
		name                     string
		configured, current, cpu int
		env                      bool
		want                     int
	}{
		{"default on many CPUs", 0, 8, 8, false, 8},
		{"pinned to one CPU", 0, 1, 1, false, 2},
		{"cgroup limit of one CPU", 0, 1, 4, false, 1},
		{"GOMAXPROCS=1 set by the user", 0, 1, 1, true, 1},
		{"configured", 3, 1, 1, false, 3},
		{"configured wins over the environment", 1, 4, 4, true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, why := pickProcs(c.configured, c.current, c.cpu, c.env); got != c.want || why == "" {
				t.Fatalf("pickProcs(%d, %d, %d, %v) = %d (%q), want %d", c.configured, c.current, c.cpu, c.env, got, why, c.want)
			}
		})
	}
}
