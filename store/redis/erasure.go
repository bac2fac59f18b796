package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
)

// The erasure's keys (store.Erasure):
//
//	chr:{T/H}:subj          set   the thread's subjects (the thread's slot)
//	chr:t:{T}:subj:<s>      set   threads of subject s (the tenant's slot)
//	chr:tombstones          zset  JSON store.Tombstone by time (ms)
//	chr:lease:<name>        string  the holder of a named lease (SET NX PX)
//
// A start that carries a subject pipelines two SADDs with its script, in
// the same round trip; the tenant's index key is on the tenant's slot, as
// its other index keys, so nothing needs a script across slots.

var _ store.Erasure = (*Store)(nil)

func (s *Store) threadSubjects(k store.Key) string { return s.prefix(k) + "subj" }
func (s *Store) subjectThreads(tenant, subject string) string {
	return s.pre + "t:{" + tenant + "}:subj:" + subject
}
func (s *Store) tombstones() string            { return s.pre + "tombstones" }
func (s *Store) namedLease(name string) string { return s.pre + "lease:" + name }

// addSubject queues a start's subject writes on pipe. They are idempotent
// and go whatever the start decides: a refused start (held, conflict)
// still names the thread under the subject, which an erasure of the
// subject then deletes, as asked.
func (s *Store) addSubject(ctx context.Context, pipe redis.Pipeliner, k store.Key, subject string) {
	pipe.SAdd(ctx, s.threadSubjects(k), subject)
	pipe.SAdd(ctx, s.subjectThreads(k.Tenant, subject), k.Thread)
}

// deleteReply reads deleteScript's {runs, subjects}.
func deleteReply(c *redis.Cmd) (runs, subs []string, err error) {
	v, err := c.Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	parts, _ := v.([]any)
	get := func(i int) []string {
		if i >= len(parts) {
			return nil
		}
		l, _ := parts[i].([]any)
		out := make([]string, 0, len(l))
		for _, x := range l {
			out = append(out, str(x))
		}
		return out
	}
	return get(0), get(1), nil
}

// unindexSubjects drops a deleted thread from its tenant's subject sets
// (one slot: the tenant's).
func (s *Store) unindexSubjects(ctx context.Context, k store.Key, subs []string) error {
	if len(subs) == 0 {
		return nil
	}
	pipe := s.c.Pipeline()
	for _, sub := range subs {
		pipe.SRem(ctx, s.subjectThreads(k.Tenant, sub), k.Thread)
	}
	_, err := pipe.Exec(ctx)
	return mapErr(err)
}

// TenantThreads lists the tenant's indexed threads and every thread that
// claimed a run id (one round trip on the tenant's slot).
func (s *Store) TenantThreads(ctx context.Context, tenant string) ([]string, error) {
	if err := store.ValidTenant(tenant); err != nil {
		return nil, err
	}
	pipe := s.c.Pipeline()
	idx := pipe.ZRange(ctx, s.tenantThreads(tenant), 0, -1)
	runs := pipe.HVals(ctx, s.tenantRuns(tenant))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, mapErr(err)
	}
	out := append(idx.Val(), runs.Val()...)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// SubjectThreads lists the tenant's threads that carried subject.
func (s *Store) SubjectThreads(ctx context.Context, tenant, subject string) ([]string, error) {
	if err := store.ValidTenant(tenant); err != nil {
		return nil, err
	}
	if err := store.ValidSubject(subject); err != nil {
		return nil, err
	}
	out, err := s.c.SMembers(ctx, s.subjectThreads(tenant, subject)).Result()
	if err != nil {
		return nil, mapErr(err)
	}
	slices.Sort(out)
	return out, nil
}

// ThreadSubjects lists the thread's subjects.
func (s *Store) ThreadSubjects(ctx context.Context, k store.Key) ([]string, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	out, err := s.c.SMembers(ctx, s.threadSubjects(k)).Result()
	if err != nil {
		return nil, mapErr(err)
	}
	slices.Sort(out)
	return out, nil
}

// AddTombstone keeps t in the tombstone set, scored by its time.
func (s *Store) AddTombstone(ctx context.Context, t store.Tombstone) error {
	if t.ID == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		t.ID = hex.EncodeToString(b[:])
	}
	if t.At.IsZero() {
		t.At = s.opts.Now()
	}
	raw, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return mapErr(s.c.ZAdd(ctx, s.tombstones(), redis.Z{Score: float64(t.At.UnixMilli()), Member: raw}).Err())
}

// ListTombstones returns the newest limit tombstones.
func (s *Store) ListTombstones(ctx context.Context, limit int) ([]store.Tombstone, error) {
	if limit <= 0 {
		limit = 100
	}
	raw, err := s.c.ZRevRange(ctx, s.tombstones(), 0, int64(limit-1)).Result()
	if err != nil {
		return nil, mapErr(err)
	}
	out := make([]store.Tombstone, 0, len(raw))
	for _, r := range raw {
		var t store.Tombstone
		if err := json.Unmarshal([]byte(r), &t); err != nil {
			return nil, fmt.Errorf("redis: tombstone: %w", err)
		}
		out = append(out, t)
	}
	return out, nil
}

// leaseScript takes the named lease for ARGV[1] (PX ARGV[2]) when it is
// free, or renews it when ARGV[1] holds it.
var leaseScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if cur then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// Lease takes or renews a store-wide named lease (SET NX PX with the
// holder as its token, in a script so that only the holder renews it).
func (s *Store) Lease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if holder == "" || ttl <= 0 {
		return false, fmt.Errorf("%w: lease %q holder %q ttl %v", store.ErrInvalid, name, holder, ttl)
	}
	n, err := leaseScript.Run(ctx, s.c, []string{s.namedLease(name)}, holder, ttl.Milliseconds()).Int()
	if err != nil {
		return false, mapErr(err)
	}
	return n == 1, nil
}

// DebugDump returns every key on every master with its value as text
// (strings whole; lists, sets, hashes, sorted sets and streams their
// members, fields, scores and entries), for tests that prove an erasure
// leaves nothing of what it erased in any key or value.
func (s *Store) DebugDump(ctx context.Context) (map[string][]byte, error) {
	out := map[string][]byte{}
	dump := func(ctx context.Context, c *redis.Client) (map[string][]byte, error) {
		got := map[string][]byte{}
		it := c.Scan(ctx, 0, s.pre+"*", 1000).Iterator()
		var keys []string
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		if err := it.Err(); err != nil {
			return nil, err
		}
		for _, k := range keys {
			typ, err := c.Type(ctx, k).Result()
			if err != nil {
				return nil, err
			}
			var v []byte
			switch typ {
			case "string":
				b, err := c.Get(ctx, k).Bytes()
				if err != nil && !errors.Is(err, redis.Nil) {
					return nil, err
				}
				v = b
			case "list":
				l, err := c.LRange(ctx, k, 0, -1).Result()
				if err != nil {
					return nil, err
				}
				v = []byte(fmt.Sprint(l))
			case "set":
				l, err := c.SMembers(ctx, k).Result()
				if err != nil {
					return nil, err
				}
				v = []byte(fmt.Sprint(l))
			case "hash":
				m, err := c.HGetAll(ctx, k).Result()
				if err != nil {
					return nil, err
				}
				v = []byte(fmt.Sprint(m))
			case "zset":
				l, err := c.ZRangeWithScores(ctx, k, 0, -1).Result()
				if err != nil {
					return nil, err
				}
				v = []byte(fmt.Sprint(l))
			case "stream":
				l, err := c.XRange(ctx, k, "-", "+").Result()
				if err != nil {
					return nil, err
				}
				v = []byte(fmt.Sprint(l))
			case "none":
				continue
			default:
				v = []byte("<" + typ + ">")
			}
			got[k] = v
		}
		return got, nil
	}
	var err error
	switch c := s.c.(type) {
	case *redis.ClusterClient:
		mu := make(chan struct{}, 1)
		err = c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			got, err := dump(ctx, n)
			mu <- struct{}{}
			defer func() { <-mu }()
			for k, v := range got {
				out[k] = v
			}
			return err
		})
	case *redis.Client:
		var got map[string][]byte
		got, err = dump(ctx, c)
		out = got
	default:
		return nil, errors.New("redisstore: DebugDump needs a single-node or cluster client")
	}
	return out, mapErr(err)
}
