package proxy

import (
	"testing"
	"time"
)

// endRecorder is a windowEnder that reports each end on a channel.
type endRecorder struct {
	name  string
	ended chan<- string
}

func (r endRecorder) windowEnded(arm uint64) {
	r.ended <- r.name + ":" + string(rune('0'+arm))
}

func TestEventWindowsEndInOrder(t *testing.T) {
	var w eventWindows
	ended := make(chan string, 16)
	now := time.Now()
	// Two windows already over, then two a little ahead: each ends once,
	// in the order they opened.
	w.add(endRecorder{"a", ended}, 1, now.Add(-2*time.Millisecond))
	w.add(endRecorder{"b", ended}, 1, now.Add(-time.Millisecond))
	w.add(endRecorder{"a", ended}, 2, now.Add(5*time.Millisecond))
	w.add(endRecorder{"c", ended}, 7, now.Add(20*time.Millisecond))
	for _, want := range []string{"a:1", "b:1", "a:2", "c:7"} {
		if got := <-ended; got != want {
			t.Fatalf("ended %s, want %s", got, want)
		}
	}
	// A window opened after the queue drained (its goroutine may have
	// returned, or be about to) still ends.
	w.add(endRecorder{"d", ended}, 3, time.Now().Add(time.Millisecond))
	if got := <-ended; got != "d:3" {
		t.Fatalf("ended %s, want d:3", got)
	}
	select {
	case got := <-ended:
		t.Fatalf("a window ended twice: %s", got)
	default:
	}
}

func TestEventWindowsDoNotEndEarly(t *testing.T) {
	var w eventWindows
	ended := make(chan string, 1)
	ends := time.Now().Add(30 * time.Millisecond)
	w.add(endRecorder{"a", ended}, 1, ends)
	<-ended
	if early := time.Until(ends); early > windowSlack {
		t.Fatalf("window ended %v before its end (slack %v)", early, windowSlack)
	}
}
