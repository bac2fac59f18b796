package sched

import (
	"runtime"
	"testing"
)

func TestProcBoost(t *testing.T) {
	base := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(base)
	if NewProcBoost(base) != nil {
		t.Fatal("a boost to the current GOMAXPROCS is not nil")
	}
	var none *ProcBoost
	none.Hold().Release() // a nil boost holds nothing

	b := NewProcBoost(base + 2)
	h1, h2 := b.Hold(), b.Hold()
	if got := runtime.GOMAXPROCS(0); got != base+2 {
		t.Fatalf("with two holds GOMAXPROCS is %d, want %d", got, base+2)
	}
	h1.Release()
	h1.Release() // a second release changes nothing
	if got := runtime.GOMAXPROCS(0); got != base+2 {
		t.Fatalf("with one hold left GOMAXPROCS is %d, want %d", got, base+2)
	}
	h2.Release()
	if got := runtime.GOMAXPROCS(0); got != base {
		t.Fatalf("with no hold GOMAXPROCS is %d, want it back at %d", got, base)
	}
}
