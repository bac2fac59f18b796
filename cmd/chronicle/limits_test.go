package main

import (
	"bufio"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/cmd/mockllm/mock"
	"github.com/chronicle-proxy/chronicle/store/redistest"
)

// sharedReplicas starts two chronicle processes sharing one Redis for store
// and limits.
func sharedReplicas(t *testing.T, m *mock.Server, connection string) (*process, *process) {
	t.Helper()
	rd := redistest.Start(t)
	cfg := `
listen: 127.0.0.1:0
store: {driver: redis, url: "` + rd.URL() + `"}
limits: {mode: shared}
leases: {ttl: 2s}
connections:
  - ` + connection + `
`
	return startChronicle(t, cfg), startChronicle(t, cfg)
}

const limitChat = `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`

// TestSharedGateAcrossReplicas: max_concurrent 3 shared by two replicas;
// 60 concurrent slow requests spread over both — the upstream never sees
// more than 3 at once, and every request completes.
func TestSharedGateAcrossReplicas(t *testing.T) {
	m, err := mock.Start("127.0.0.1:0", mock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a, b := sharedReplicas(t, m, `{name: openai, provider: openai, base_url: "`+m.URL()+`", persist: false, max_concurrent: 3, queue: {max_waiting: 100, timeout: 60s}}`)
	var wg sync.WaitGroup
	codes := make(chan int, 60)
	for i := 0; i < 60; i++ {
		p := a
		if i%2 == 1 {
			p = b
		}
		wg.Add(1)
		go func(addr string) {
			defer wg.Done()
			resp := post(t, "http://"+addr+"/openai/v1/chat/completions", limitChat, "Authorization", "Bearer k", "X-Mock-First-Byte-Delay", "30ms")
			readAll(t, resp)
			codes <- resp.StatusCode
		}(p.addr)
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Fatalf("a request got %d", c)
		}
	}
	if got := m.MaxInFlight(); got > 3 || got == 0 {
		t.Fatalf("upstream saw %d in flight at once; the shared cap is 3", got)
	}
	if n := len(m.Requests()); n != 60 {
		t.Fatalf("upstream saw %d requests", n)
	}
}

// TestSharedSlotsFreedWhenReplicaDies: a replica killed with SIGKILL while
// holding every slot loses them when their lease lapses; the other
// replica's waiters get them.
func TestSharedSlotsFreedWhenReplicaDies(t *testing.T) {
	m, err := mock.Start("127.0.0.1:0", mock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a, b := sharedReplicas(t, m, `{name: openai, provider: openai, base_url: "`+m.URL()+`", persist: false, max_concurrent: 3, queue: {max_waiting: 100, timeout: 60s}}`)
	stream := `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	for i := 0; i < 3; i++ {
		resp := post(t, "http://"+a.addr+"/openai/v1/chat/completions", stream, "Authorization", "Bearer k", "X-Mock-Gate", "never")
		defer resp.Body.Close()
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "data:") {
			t.Fatalf("holder %d: %q %v", i, line, err)
		}
	}
	done := make(chan int, 3)
	for i := 0; i < 3; i++ {
		go func() {
			resp := post(t, "http://"+b.addr+"/openai/v1/chat/completions", limitChat, "Authorization", "Bearer k")
			readAll(t, resp)
			done <- resp.StatusCode
		}()
	}
	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	for i := 0; i < 3; i++ {
		if c := <-done; c != 200 {
			t.Fatalf("waiter on the live replica got %d", c)
		}
	}
}

// TestSharedRateLimit: rpm 60 shared by two replicas — of 120 requests
// alternating between them, exactly 60 pass.
func TestSharedRateLimit(t *testing.T) {
	m, err := mock.Start("127.0.0.1:0", mock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	a, b := sharedReplicas(t, m, `{name: openai, provider: openai, base_url: "`+m.URL()+`", persist: false, rate: {rpm: 60}}`)
	pass, limited := 0, 0
	start := time.Now()
	for i := 0; i < 120; i++ {
		p := a
		if i%2 == 1 {
			p = b
		}
		resp := post(t, "http://"+p.addr+"/openai/v1/chat/completions", limitChat, "Authorization", "Bearer k")
		body := readAll(t, resp)
		switch resp.StatusCode {
		case 200:
			if i < 60 && limited > 0 {
				t.Fatalf("request %d refused within the first 60", i)
			}
			pass++
		case 429:
			limited++
			if resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "rate_limited") {
				t.Fatalf("429 without Retry-After: %s", body)
			}
		default:
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, body)
		}
	}
	// rpm 60 refills one request a second: a slow machine that took s
	// seconds for the loop may pass s more.
	refill := int(time.Since(start) / time.Second)
	if pass < 60 || pass > 60+refill || pass+limited != 120 {
		t.Fatalf("passed %d, limited %d in %s; want 60 (+%d refilled) passed", pass, limited, time.Since(start), refill)
	}
}
