package embedded_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/embedded"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

const crashEnv = "CHRONICLE_STORE_CRASH_DIR"

const (
	crashFsyncEnv = "CHRONICLE_STORE_CRASH_FSYNC"
	crashThreads  = 4
)

// turnMsgs returns turn i's user and assistant messages: a whole turn is
// both, in one Finish. Every fourth reply is large (kept in a file of its
// own, outside the key space).
func turnMsgs(thread, i int) ([][]byte, []store.Hash) {
	u := []byte(fmt.Sprintf(`{"role":"user","content":"thread %d turn %d"}`, thread, i))
	a := []byte(fmt.Sprintf(`{"role":"assistant","content":"reply %d/%d"}`, thread, i))
	if isLargeTurn(i) {
		a = []byte(fmt.Sprintf(`{"role":"assistant","content":"reply %d/%d %s"}`, thread, i, strings.Repeat("z", 200<<10)))
	}
	return [][]byte{u, a}, []store.Hash{storetest.HashOf(u), storetest.HashOf(a)}
}

func isLargeTurn(i int) bool { return i%4 == 3 }

// TestMain lets the test binary act as the crash child.
func TestMain(m *testing.M) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(dir)
		return
	}
	os.Exit(m.Run())
}

// crashChild writes turns on several threads until it is killed, printing
// each finished turn.
func crashChild(dir string) {
	s, err := embedded.Open(dir, embedded.Options{Fsync: embedded.Fsync(os.Getenv(crashFsyncEnv))})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for th := range crashThreads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := store.Key{Tenant: "crash", Thread: "th-" + strconv.Itoa(th)}
			start := 0
			if thr, err := s.LoadThread(ctx, k); err == nil {
				start = len(thr.Messages) / 2
			}
			for i := start; ; i++ {
				st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: fmt.Sprintf("t%d-r%d-p%d", th, i, os.Getpid()), TTL: time.Hour})
				if err != nil {
					fmt.Println("start:", err)
					os.Exit(2)
				}
				msgs, hashes := turnMsgs(th, i)
				evs := [][]byte{[]byte("data: a\n\n"), []byte("data: b\n\n")}
				if err := s.AppendEvents(ctx, st.Lease, 1, evs); err != nil {
					fmt.Println("events:", err)
					os.Exit(2)
				}
				tr := store.Transcript{Keep: 2 * i, Messages: msgs, Hashes: hashes}
				if i > 0 {
					_, prev := turnMsgs(th, i-1)
					tr.KeepHash = prev[1]
				}
				if err := s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr}); err != nil {
					fmt.Println("finish:", err)
					os.Exit(2)
				}
				mu.Lock()
				fmt.Printf("turn %d %d\n", th, i)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// TestCrashWholeTurns kills a writer with SIGKILL mid-flight, several times,
// under each fsync setting, and checks after each reopen that every turn
// the writer was told is stored is there, every thread holds whole turns
// only, every completed run's turn is there, and every large message's
// file is there with no file left over.
func TestCrashWholeTurns(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test re-executes the test binary")
	}
	for _, mode := range []embedded.Fsync{embedded.FsyncInterval, embedded.FsyncAlways} {
		t.Run(string(mode), func(t *testing.T) { crashWholeTurns(t, mode) })
	}
}

func crashWholeTurns(t *testing.T, mode embedded.Fsync) {
	dir := t.TempDir()
	for round := range 3 {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashEnv+"="+dir, crashFsyncEnv+"="+string(mode))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		turns := 0
		acked := make([]int, crashThreads) // turns each thread was told are stored
		for sc.Scan() && turns < 40 {
			var th, i int
			if _, err := fmt.Sscanf(sc.Text(), "turn %d %d", &th, &i); err != nil {
				t.Fatalf("child: %s", sc.Text())
			}
			acked[th] = max(acked[th], i+1)
			turns++
		}
		if turns < 40 {
			t.Fatalf("round %d: child stopped after %d turns", round, turns)
		}
		if err := cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()

		s, err := embedded.Open(dir, embedded.Options{})
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		ctx := context.Background()
		largeMsgs := 0
		for th := range crashThreads {
			k := store.Key{Tenant: "crash", Thread: "th-" + strconv.Itoa(th)}
			thr, err := s.LoadThread(ctx, k)
			if err != nil {
				t.Fatalf("round %d thread %d: %v", round, th, err)
			}
			if len(thr.Messages)%2 != 0 {
				t.Fatalf("round %d thread %d: %d messages, a half turn", round, th, len(thr.Messages))
			}
			if len(thr.Messages)/2 < acked[th] {
				t.Fatalf("round %d thread %d: %d turns stored, %d acknowledged", round, th, len(thr.Messages)/2, acked[th])
			}
			var want [][]byte
			for i := 0; i < len(thr.Messages)/2; i++ {
				m, _ := turnMsgs(th, i)
				want = append(want, m...)
			}
			// cmp.Diff crawls over the large messages: only a difference
			// needs its report.
			if !slices.EqualFunc(want, thr.Messages, bytes.Equal) {
				t.Fatalf("round %d thread %d (-want +got):\n%s", round, th, cmp.Diff(want, thr.Messages))
			}
			runs, err := s.ListRuns(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			completed := 0
			for _, r := range runs {
				if r.Status == store.Completed {
					completed++
				}
			}
			if completed != len(thr.Messages)/2 {
				t.Fatalf("round %d thread %d: %d completed runs, %d turns", round, th, completed, len(thr.Messages)/2)
			}
			for i := 0; i < len(thr.Messages)/2; i++ {
				if isLargeTurn(i) {
					largeMsgs++
				}
			}
		}
		files, err := os.ReadDir(filepath.Join(dir, "blobs"))
		if err != nil {
			t.Fatal(err)
		}
		if largeMsgs == 0 || len(files) != largeMsgs {
			t.Fatalf("round %d: %d files for %d large messages", round, len(files), largeMsgs)
		}
		// Runs the killed child left running hold leases: sweep with a
		// clock past their expiry so the next child can continue.
		s.Close()
		s2, err := embedded.Open(dir, embedded.Options{Now: func() time.Time { return time.Now().Add(2 * time.Hour) }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s2.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		s2.Close()
	}
}
