package redisstore

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
)

// batch is one round trip: a pipeline whose scripts go as EVALSHA next to
// plain commands (on a cluster, go-redis splits it by node and sends the
// parts in parallel). Open preloads every script, so EVALSHA normally
// finds it; after a server restart or SCRIPT FLUSH the server answers
// NOSCRIPT without running the script, and exec re-sends exactly those
// scripts with their bodies (EVAL, which caches them again), in their
// order, once. Commands that
// ran are never sent again, so a re-send cannot apply anything twice.
type batch struct {
	ctx     context.Context
	pipe    redis.Pipeliner
	scripts []queuedScript
}

type queuedScript struct {
	sc   *redis.Script
	keys []string
	args []any
	cmd  *redis.Cmd
}

func (s *Store) batch(ctx context.Context) *batch {
	return &batch{ctx: ctx, pipe: s.c.Pipeline()}
}

// script queues sc as EVALSHA; its result lands in the returned Cmd, also
// when exec had to re-send it.
func (b *batch) script(sc *redis.Script, keys []string, args ...any) *redis.Cmd {
	cmd := b.pipe.EvalSha(b.ctx, sc.Hash(), keys, args...)
	b.scripts = append(b.scripts, queuedScript{sc, keys, args, cmd})
	return cmd
}

// exec sends the batch and returns the first error of any command other
// than redis.Nil (unmapped: callers read each command's result).
func (b *batch) exec(s *Store) error {
	cmds, err := b.pipe.Exec(b.ctx)
	if err != nil && !errors.Is(err, redis.Nil) && !isRedisErr(err) {
		return err // the connection failed: no command result is known
	}
	var again []queuedScript
	for _, q := range b.scripts {
		if redis.HasErrorPrefix(q.cmd.Err(), "NOSCRIPT") {
			again = append(again, q)
		}
	}
	if len(again) > 0 {
		pipe := s.c.Pipeline()
		evals := make([]*redis.Cmd, len(again))
		for i, q := range again {
			evals[i] = q.sc.Eval(b.ctx, pipe, q.keys, q.args...)
		}
		if _, err := pipe.Exec(b.ctx); err != nil && !errors.Is(err, redis.Nil) && !isRedisErr(err) {
			return err
		}
		for i, q := range again {
			q.cmd.SetErr(evals[i].Err())
			q.cmd.SetVal(evals[i].Val())
		}
	}
	for _, c := range cmds {
		if err := c.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
	}
	return nil
}

func isRedisErr(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}

// preload puts every script into the server's cache (on a cluster, every
// shard's). Failures are ignored: a server that refuses SCRIPT LOAD (an
// ACL) still runs the scripts through the NOSCRIPT fallback.
func (s *Store) preload(ctx context.Context) {
	for _, sc := range scripts {
		if err := sc.Load(ctx, s.c).Err(); err != nil && !isRedisErr(err) {
			return // the server went away; the fallback covers it
		}
	}
}

// queueIndex adds the audit index writes of a thread write at now (the
// timestamp the script writes as updated) to pipe. created is true for a
// transcript write, which creates the thread: it adds the thread to the
// indexes. Otherwise only entries that exist move (ZADD XX GT), so a
// thread that never saved a transcript is not listed, and its tenant not
// added.
//
// The index commands run whatever the script decides: a refused (fenced,
// conflicting) or repeated write still moves the thread's score to now, and
// a refused first write may index a thread that has no transcript. Both are
// harmless: GT never moves an entry back, ListThreads skips a thread
// without a transcript and reads the summary (updated time included) from
// the thread's own hash, so a score ahead of it only reorders the listing
// by at most the refused attempt's time; DeleteThread removes the entries.
func (s *Store) queueIndex(ctx context.Context, pipe redis.Pipeliner, k store.Key, now int64, created bool) {
	score := float64(now)
	args := redis.ZAddArgs{GT: true, XX: !created, Members: []redis.Z{{Score: score, Member: k.Thread}}}
	pipe.ZAddArgs(ctx, s.tenantThreads(k.Tenant), args)
	args.Members = []redis.Z{{Score: score, Member: k.Tenant + "/" + k.Thread}}
	pipe.ZAddArgs(ctx, s.allThreads(), args)
	if created {
		pipe.SAdd(ctx, s.tenants(), k.Tenant)
	}
}
