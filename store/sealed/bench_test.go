package sealed_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chronicle-proxy/chronicle/store"
	"github.com/chronicle-proxy/chronicle/store/storetest"
)

// memBackend is the least a turn needs from a backend, in memory: it
// keeps the last transcript written and gives it back on StartRun, so a
// benchmark over it times the wrapper alone.
type memBackend struct {
	store.Store
	mu   sync.Mutex
	msgs [][]byte
	sys  []byte
	keys map[string][]byte
}

func (m *memBackend) StartRun(ctx context.Context, r store.StartRun) (*store.Started, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := &store.Started{Created: true, Lease: store.Lease{Key: r.Key, RunID: r.RunID, Token: 1}}
	if r.LoadThread && m.msgs != nil {
		st.ThreadFound = true
		st.Thread = store.Thread{Key: r.Key, System: append([]byte(nil), m.sys...), Messages: make([][]byte, len(m.msgs))}
		for i, b := range m.msgs {
			st.Thread.Messages[i] = append([]byte(nil), b...)
		}
	}
	return st, nil
}

func (m *memBackend) Finish(ctx context.Context, l store.Lease, f *store.Finish) error {
	if f.Transcript != nil {
		m.mu.Lock()
		m.msgs = append(m.msgs[:f.Transcript.Keep:f.Transcript.Keep], f.Transcript.Messages...)
		m.sys = f.Transcript.System
		m.mu.Unlock()
	}
	return nil
}

func (m *memBackend) AppendEvents(ctx context.Context, l store.Lease, first int64, events [][]byte) error {
	return nil
}

func (m *memBackend) CreateKey(ctx context.Context, tenant, id string, wrapped []byte) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w, ok := m.keys[tenant+"/"+id]; ok {
		return w, nil
	}
	m.keys[tenant+"/"+id] = wrapped
	return wrapped, nil
}

func (m *memBackend) GetKey(ctx context.Context, tenant, id string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if w, ok := m.keys[tenant+"/"+id]; ok {
		return w, nil
	}
	return nil, store.ErrNotFound
}

// BenchmarkTurn times one turn's store traffic through the wrapper and
// without it (plain): the start that loads a 20-message thread (each
// message about 600 bytes, and a system blob), the finish that writes the
// two new messages and a 2 KB response body, and for a stream 60 events of
// about 120 bytes (three event batches). stream-cached is a stream whose
// start reads no messages (the thread cache's copy is current, the common
// case in replace mode). Over an in-memory backend, so the difference is
// the wrapper's cost per turn.
func BenchmarkTurn(b *testing.B) {
	k := store.Key{Tenant: "acme", Thread: "t1"}
	text := strings.Repeat("Lorem ipsum dolor sit amet, consectetur adipiscing elit. ", 10)
	msg := func(i int) []byte {
		return []byte(fmt.Sprintf(`{"role":"user","content":"%d %s"}`, i, text))
	}
	var msgs [][]byte
	var hashes []store.Hash
	for i := 0; i < 22; i++ {
		msgs = append(msgs, msg(i))
		hashes = append(hashes, storetest.HashOf(msgs[i]))
	}
	resp := []byte(`{"choices":[{"message":{"role":"assistant","content":"` + strings.Repeat(text, 4) + `"}}]}`)
	events := make([][]byte, 60)
	for i := range events {
		events[i] = []byte(fmt.Sprintf(`data: {"choices":[{"delta":{"content":"token %d of the answer, a few words"}}]}`, i))
	}
	sys := []byte(`{"parts":[{"text":"` + text + `"}]}`)
	for _, c := range []struct {
		name         string
		stream, load bool
	}{{"nonstream", false, true}, {"stream", true, true}, {"stream-cached", true, false}} {
		stream := c.stream
		for _, seal := range []bool{false, true} {
			name := c.name + "/" + map[bool]string{false: "plain", true: "sealed"}[seal]
			b.Run(name, func(b *testing.B) {
				be := &memBackend{keys: map[string][]byte{}}
				var st store.Store = be
				if seal {
					st = wrap(b, be, kek(b, "k1"))
				}
				ctx := context.Background()
				first := &store.Finish{Status: store.Completed, Transcript: &store.Transcript{Messages: msgs[:20], Hashes: hashes[:20], System: sys}}
				if err := st.Finish(ctx, store.Lease{Key: k}, first); err != nil {
					b.Fatal(err)
				}
				tr := store.Diff(hashes[:20], msgs, hashes)
				tr.System = sys
				f := &store.Finish{Status: store.Completed, Transcript: &tr, Response: resp}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					started, err := st.StartRun(ctx, store.StartRun{Key: k, RunID: "r", Fingerprint: "xx1234.ab", LoadThread: c.load, TTL: time.Minute})
					if err != nil || c.load && len(started.Thread.Messages) != 20 {
						b.Fatal(err)
					}
					if stream {
						for j := 0; j < 40; j += 20 {
							if err := st.AppendEvents(ctx, started.Lease, int64(j+1), events[j:j+20]); err != nil {
								b.Fatal(err)
							}
						}
						f.EventsFrom, f.Events = 41, events[40:]
					}
					if err := st.Finish(ctx, started.Lease, f); err != nil {
						b.Fatal(err)
					}
					// The next start reads 20 messages again.
					be.mu.Lock()
					be.msgs = be.msgs[:20]
					be.mu.Unlock()
				}
			})
		}
	}
}

func (m *memBackend) ListKeys(ctx context.Context, tenant string) ([]store.WrappedKey, error) {
	return nil, nil
}

func (m *memBackend) ReplaceKey(ctx context.Context, tenant, id string, old, wrapped []byte) error {
	return nil
}

func (m *memBackend) DeleteKeys(ctx context.Context, tenant string) (int, error) { return 0, nil }
