package proxy

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
)

// TestTurnStarters: persisted turns start on starters that are kept for
// the next turns, at most maxIdleStarters of them after a burst, and
// Shutdown ends the idle ones.
func TestTurnStarters(t *testing.T) {
	m := startMock(t)
	p := startProxyWith(t, m, "connections:\n  - {name: up, provider: openai, base_url: \"${MOCK}\"}\n", openEmbedded(t, t.TempDir()))
	turn := func(thread string) {
		resp, body := do(t, "POST", p.URL+"/up/v1/chat/completions", `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
			"Authorization", "Bearer k", "X-Thread-Id", thread)
		if resp.StatusCode != 200 || resp.Header.Get("X-Persisted") == "false" {
			t.Errorf("turn on %s: %d %s", thread, resp.StatusCode, body)
		}
	}
	turn("first")
	if n := p.starters.Idle(); n != 1 {
		t.Fatalf("after one turn %d starters wait, want 1", n)
	}
	turn("second")
	if n := p.starters.Idle(); n != 1 {
		t.Fatalf("after two turns in a row %d starters wait, want the same 1", n)
	}

	const burst = maxIdleStarters + 16
	var wg sync.WaitGroup
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			turn(fmt.Sprintf("burst-%d", i))
		}()
	}
	wg.Wait()
	if n := p.starters.Idle(); n < 1 || n > maxIdleStarters {
		t.Fatalf("after a burst of %d turns %d starters wait, want 1 to %d", burst, n, maxIdleStarters)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if n := p.starters.Idle(); n != 0 {
		t.Fatalf("after Shutdown %d starters wait, want 0", n)
	}
	// That a call after Stop still runs, on a goroutine that then ends, is
	// TestStarters in proxy/internal/sched.
}
