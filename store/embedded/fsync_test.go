package embedded

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

// powerThreads write turns concurrently in the power-loss tests.
const powerThreads = 4

func powerTurn(th, i int) ([][]byte, []store.Hash) {
	u := []byte(fmt.Sprintf(`{"role":"user","content":"thread %d turn %d"}`, th, i))
	a := []byte(fmt.Sprintf(`{"role":"assistant","content":"reply %d/%d"}`, th, i))
	return [][]byte{u, a}, []store.Hash{storetest.HashOf(u), storetest.HashOf(a)}
}

func powerKey(th int) store.Key { return store.Key{Tenant: "power", Thread: "th-" + strconv.Itoa(th)} }

// turnWriters runs powerThreads writers of whole turns until stop closes;
// acked()[th] is how many turns thread th was told are stored.
type turnWriters struct {
	mu    sync.Mutex
	cond  *sync.Cond // signalled at every acknowledgement and failure
	acked [powerThreads]int
	stop  chan struct{}
	wg    sync.WaitGroup
	err   error
}

func startTurnWriters(s *Store) *turnWriters {
	w := &turnWriters{stop: make(chan struct{})}
	w.cond = sync.NewCond(&w.mu)
	ctx := context.Background()
	for th := range powerThreads {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			k := powerKey(th)
			for i := 0; ; i++ {
				select {
				case <-w.stop:
					return
				default:
				}
				st, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: fmt.Sprintf("t%d-r%d", th, i), TTL: time.Hour})
				if err == nil {
					msgs, hashes := powerTurn(th, i)
					tr := store.Transcript{Keep: 2 * i, Messages: msgs, Hashes: hashes}
					if i > 0 {
						_, prev := powerTurn(th, i-1)
						tr.KeepHash = prev[1]
					}
					err = s.Finish(ctx, st.Lease, &store.Finish{Status: store.Completed, Transcript: &tr})
				}
				w.mu.Lock()
				if err != nil && w.err == nil {
					w.err = err
				} else if err == nil {
					w.acked[th] = i + 1
				}
				w.cond.Broadcast()
				w.mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	return w
}

// waitFor returns the acknowledged counts once every thread has at least n.
func (w *turnWriters) waitFor(t *testing.T, n int) [powerThreads]int {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if w.err != nil {
			t.Fatal(w.err)
		}
		least := w.acked[0]
		for _, a := range w.acked {
			least = min(least, a)
		}
		if least >= n {
			return w.acked
		}
		w.cond.Wait()
	}
}

func (w *turnWriters) end() {
	close(w.stop)
	w.wg.Wait()
}

// checkAfterPowerLoss opens the store on fs (a crash clone) and checks that
// every thread holds whole turns in order, at least want[th] of them.
func checkAfterPowerLoss(t *testing.T, dir string, fs vfs.FS, want [powerThreads]int) {
	t.Helper()
	s, err := Open(dir, Options{FS: fs})
	if err != nil {
		t.Fatalf("open after power loss: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	for th := range powerThreads {
		thr, err := s.LoadThread(ctx, powerKey(th))
		if err != nil {
			t.Fatalf("thread %d: %v", th, err)
		}
		if len(thr.Messages)%2 != 0 || len(thr.Messages)/2 < want[th] {
			t.Fatalf("thread %d: %d messages after power loss, %d turns acknowledged before it", th, len(thr.Messages), want[th])
		}
		for i := 0; i < len(thr.Messages)/2; i++ {
			msgs, _ := powerTurn(th, i)
			if string(thr.Messages[2*i]) != string(msgs[0]) || string(thr.Messages[2*i+1]) != string(msgs[1]) {
				t.Fatalf("thread %d turn %d: %s / %s", th, i, thr.Messages[2*i], thr.Messages[2*i+1])
			}
		}
	}
}

// TestPowerLossFsyncAlways: under FsyncAlways a power loss (a clone of the
// file system holding only what was synced) loses no acknowledged turn,
// whatever the writers were doing at that moment.
func TestPowerLossFsyncAlways(t *testing.T) {
	dir := t.TempDir()
	fs := vfs.NewCrashableMem()
	s, err := Open(dir, Options{FS: fs, Fsync: FsyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := startTurnWriters(s)
	acked := w.waitFor(t, 30)
	crashed := fs.CrashClone(vfs.CrashCloneCfg{})
	w.end()
	checkAfterPowerLoss(t, dir, crashed, acked)
}

// TestPowerLossFsyncInterval: under FsyncInterval a power loss keeps every
// turn acknowledged before the last sync of the log, loses later ones
// whole (never half a turn), and the store opens whatever part of the
// unsynced tail the disk wrote (random blocks of it).
func TestPowerLossFsyncInterval(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(strconv.Itoa(int(seed)), func(t *testing.T) {
			dir := t.TempDir()
			fs := vfs.NewCrashableMem()
			// The ticker stays out of the way; the test syncs.
			s, err := Open(dir, Options{FS: fs, Fsync: FsyncInterval, FsyncInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			w := startTurnWriters(s)
			synced := w.waitFor(t, 20)
			if err := s.fs.syncLogs(); err != nil {
				t.Fatal(err)
			}
			w.waitFor(t, synced[0]+20)
			rng := rand.New(rand.NewPCG(seed, seed))
			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rng})
			w.end()
			checkAfterPowerLoss(t, dir, crashed, synced)
		})
	}
}

// failingSyncFS is a file system whose files' syncs fail once fail is set.
type failingSyncFS struct {
	vfs.FS
	fail *atomic.Bool
}

func (fs failingSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return failingSyncFile{f, fs.fail}, err
}

func (fs failingSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return failingSyncFile{f, fs.fail}, err
}

type failingSyncFile struct {
	vfs.File
	fail *atomic.Bool
}

var errSyncFailed = errors.New("fdatasync: input/output error")

func (f failingSyncFile) SyncData() error {
	if f.fail.Load() {
		return errSyncFailed
	}
	return f.File.SyncData()
}

// TestFailedLogSyncStopsWrites: under FsyncInterval a failed sync of the
// log means acknowledged turns may not be on disk, and the kernel need not
// report it again: the store refuses every write and fails Ping from then
// on, so no client is told a turn is stored that may not last.
func TestFailedLogSyncStopsWrites(t *testing.T) {
	var fail atomic.Bool
	s, err := Open(t.TempDir(), Options{FS: failingSyncFS{vfs.NewMem(), &fail}, Fsync: FsyncInterval, FsyncInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	k := store.Key{Tenant: "t", Thread: "x"}
	if _, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r1", TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := s.syncLog(); err != nil {
		t.Fatalf("a sync that works: %v", err)
	}
	fail.Store(true)
	if err := s.syncLog(); !errors.Is(err, errSyncFailed) {
		t.Fatalf("the failing sync: %v", err)
	}
	fail.Store(false) // the kernel need not report it again
	if _, err := s.StartRun(ctx, store.StartRun{Key: k, RunID: "r2", TTL: time.Minute}); !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, errSyncFailed) {
		t.Fatalf("a write after the failed sync: %v, want ErrUnavailable", err)
	}
	if err := s.Ping(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Ping after the failed sync: %v, want ErrUnavailable", err)
	}
	if _, err := s.GetRun(ctx, k, "r1"); err != nil {
		t.Fatalf("reads go on: %v", err)
	}
}
