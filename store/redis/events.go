package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
)

// AppendEvents appends a batch as one stream entry (appendScript), id
// "<last seq>-0", in one script, so a retried batch skips what is stored.
func (s *Store) AppendEvents(ctx context.Context, l store.Lease, first int64, events [][]byte) error {
	if first < 1 {
		return fmt.Errorf("%w: first event %d", store.ErrInvalid, first)
	}
	if len(events) == 0 {
		return nil
	}
	// A batch, so concurrent runs' event writes share round trips.
	b := s.batch(ctx)
	cmd := s.queueAppend(b, l, first, events)
	if err := b.exec(s); err != nil {
		return mapErr(err)
	}
	r := result(cmd.Val())
	switch str(r[0]) {
	case "fenced":
		return fmt.Errorf("thread %s run %s: %w", l.Key, l.RunID, store.ErrFenced)
	case "gap":
		return fmt.Errorf("run %s has %s events, append starts at %d: %w", l.RunID, str(r[1]), first, store.ErrConflict)
	}
	return nil
}

// queueAppend queues the append script for events first, first+1, … in b.
func (s *Store) queueAppend(b *batch, l store.Lease, first int64, events [][]byte) *redis.Cmd {
	args := append(evalArgs(8), b.str(s.meta(l.Key)), b.str(l.RunID), b.int(l.Token), b.int(first), s.retention, b.int(int64(s.opts.MaxEvents)),
		b.int(int64(len(events))), eventsBatch(events))
	return b.evalsha(appendScript, 1, args)
}

// eventsBatch packs events as one value: "<length>:<event>" for each.
func eventsBatch(events [][]byte) []byte { return appendEvents(nil, events) }

// finishEvents packs the log's last batch as the finish script takes it:
// "<first>:<count>:<maxlen>:", then the batch as eventsBatch packs it.
func finishEvents(first, maxlen int64, events [][]byte) []byte {
	b := make([]byte, 0, 40)
	b = strconv.AppendInt(b, first, 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(len(events)), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, maxlen, 10)
	b = append(b, ':')
	return appendEvents(b, events)
}

// appendEvents appends events to b as eventsBatch packs them.
func appendEvents(b []byte, events [][]byte) []byte {
	n := len(b)
	for _, e := range events {
		n += len(e) + 8
	}
	b = slices.Grow(b, n-len(b))
	for _, e := range events {
		b = strconv.AppendInt(b, int64(len(e)), 10)
		b = append(b, ':')
		b = append(b, e...)
	}
	return b
}

// eachEvent calls fn for each event of a packed batch whose last event is
// last, in order, with its sequence number; it stops at a malformed entry
// or at fn's first error.
func eachEvent(batch string, last int64, fn func(seq int64, data string) error) error {
	var events []string
	for len(batch) > 0 {
		c := strings.IndexByte(batch, ':')
		if c < 1 {
			break
		}
		n, err := strconv.Atoi(batch[:c])
		if err != nil || n < 0 || n > len(batch)-c-1 {
			break
		}
		events = append(events, batch[c+1:c+1+n])
		batch = batch[c+1+n:]
	}
	first := last - int64(len(events)) + 1
	for i, e := range events {
		if err := fn(first+int64(i), e); err != nil {
			return err
		}
	}
	return nil
}

// followBlock bounds one blocking XREAD, so a cancelled context is noticed.
const followBlock = 2 * time.Second

// FollowEvents reads the run's stream after `after` and then blocks on it
// (XREAD BLOCK) until the end marker the finishing step appends
// ("<n>-1", field e). Before it first blocks it marks the run followed, so
// that a run which ends without events still gets the marker that wakes
// it.
func (s *Store) FollowEvents(ctx context.Context, k store.Key, id string, after int64, fn func(store.Event) error) error {
	if err := k.Validate(); err != nil {
		return err
	}
	p := s.prefix(k)
	ek, rk := p+"ev:"+id, p+"run:"+id
	last := strconv.FormatInt(after, 10) + "-0"
	if after <= 0 {
		last = "0-0"
	}
	block := time.Duration(-1) // -1: do not block
	endedSeen := false
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := s.c.XRead(ctx, &redis.XReadArgs{Streams: []string{ek, last}, Count: 512, Block: block}).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return mapErr(err)
		}
		n := 0
		for _, st := range res {
			for _, m := range st.Messages {
				n++
				last = m.ID
				seq, sub, _ := strings.Cut(m.ID, "-")
				if sub != "0" {
					return nil // the end marker
				}
				q, _ := strconv.ParseInt(seq, 10, 64)
				if batch, ok := m.Values["b"].(string); ok {
					// A batch; the first read may start inside it.
					err := eachEvent(batch, q, func(seq int64, data string) error {
						if seq <= after {
							return nil
						}
						return fn(store.Event{Seq: seq, Data: []byte(data)})
					})
					if err != nil {
						return err
					}
					continue
				}
				data, _ := m.Values["d"].(string) // a log written before batches
				if err := fn(store.Event{Seq: q, Data: []byte(data)}); err != nil {
					return err
				}
			}
		}
		switch {
		case n > 0:
			block = -1
			continue
		case block >= 0:
			block = -1 // a blocking read timed out: check the run again
			continue
		case endedSeen:
			// The run ended and a read after that found no end marker:
			// the log expired or was trimmed away.
			return nil
		}
		// The run's status, and (running) a request for the end marker: a
		// run without events gets its log's end only when someone follows.
		st, err := followScript.Run(ctx, s.c, []string{rk}).Text()
		if errors.Is(err, redis.Nil) {
			return fmt.Errorf("run %s/%s: %w", k, id, store.ErrNotFound)
		}
		if err != nil {
			return mapErr(err)
		}
		if store.Status(st).Ended() {
			endedSeen = true // read once more: the marker may have landed since
			continue
		}
		block = followBlock
	}
}

// ListThreads lists threads newest-updated first from the per-tenant (or
// cross-tenant) sorted set, reading each candidate's summary from its meta
// hash. The cursor is "<score>:<member>".
func (s *Store) ListThreads(ctx context.Context, q store.ThreadQuery) (store.ThreadPage, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 50
	}
	if limit > 500 {
		limit = 500
	}
	key := s.allThreads()
	if q.Tenant != "" {
		key = s.tenantThreads(q.Tenant)
	}
	max, min := "+inf", "-inf"
	if !q.Until.IsZero() {
		max = strconv.FormatInt(q.Until.UnixMilli(), 10)
	}
	if !q.Since.IsZero() {
		min = strconv.FormatInt(q.Since.UnixMilli(), 10)
	}
	var curScore float64
	var curMember string
	if q.Cursor != "" {
		sc, m, ok := strings.Cut(q.Cursor, ":")
		f, err := strconv.ParseFloat(sc, 64)
		if !ok || err != nil {
			return store.ThreadPage{}, fmt.Errorf("%w: cursor", store.ErrInvalid)
		}
		curScore, curMember = f, m
		if mx, _ := strconv.ParseFloat(max, 64); max == "+inf" || f < mx {
			max = sc
		}
	}
	page := store.ThreadPage{Threads: []store.ThreadSummary{}}
	const chunk = 200
	for offset := int64(0); ; offset += chunk {
		zs, err := s.c.ZRevRangeByScoreWithScores(ctx, key, &redis.ZRangeBy{Max: max, Min: min, Offset: offset, Count: chunk}).Result()
		if err != nil {
			return page, mapErr(err)
		}
		type cand struct {
			k      store.Key
			z      redis.Z
			fields *redis.SliceCmd
		}
		var cands []cand
		pipe := s.c.Pipeline()
		for _, z := range zs {
			m := z.Member.(string)
			if q.Cursor != "" && z.Score == curScore && m >= curMember {
				continue
			}
			k := store.Key{Tenant: q.Tenant, Thread: m}
			if q.Tenant == "" {
				k = parseThreadMember(m)
			}
			cands = append(cands, cand{k, z, pipe.HMGet(ctx, s.meta(k), "conn", "fmt", "model", "created", "updated", "nruns", "last", "ui", "uo", "uc", "ur", "par", "fat", "frun")})
		}
		if len(cands) > 0 {
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				return page, mapErr(err)
			}
		}
		for _, c := range cands {
			v := c.fields.Val()
			f := make([]string, len(v))
			for i, x := range v {
				f[i], _ = x.(string)
			}
			if f[3] == "" {
				continue // deleted since it was indexed
			}
			if (q.Connection != "" && f[0] != q.Connection) || (q.Model != "" && f[2] != q.Model) || (q.Status != "" && store.Status(f[6]) != q.Status) {
				continue
			}
			if len(page.Threads) == limit {
				return page, nil
			}
			i64 := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
			page.Threads = append(page.Threads, store.ThreadSummary{Key: c.k, Connection: f[0], Format: f[1], Model: f[2],
				CreatedAt: fromMS(f[3]), UpdatedAt: fromMS(f[4]), Runs: i64(f[5]), LastStatus: store.Status(f[6]),
				Usage: store.Usage{InputTokens: i64(f[7]), OutputTokens: i64(f[8]), CachedTokens: i64(f[9]), ReasoningTokens: i64(f[10])},
				Fork:  forkPoint(f[11], f[12], f[13])})
			page.NextCursor = strconv.FormatFloat(c.z.Score, 'f', -1, 64) + ":" + c.z.Member.(string)
		}
		if len(zs) < chunk {
			page.NextCursor = ""
			return page, nil
		}
	}
}
