package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/store"
)

// forkScript writes a new thread from nothing: KEYS the new thread's
// meta; ARGV now, parent, at, run, then a transcript write's arguments
// (transcriptArgs: keep, keep hash, hash blob, hassys, syssum, sys, conn,
// fmt, model, digest), the number of subjects n and the n subjects (added
// to the thread's subject set), then the messages (large ones staged). Returns
// {'conflict'} (the thread exists, or a stage is missing) | {'ok'}.
// Every key it writes is in the new thread's slot, so the thread appears
// whole or not at all.
var forkScript = redis.NewScript(luaBase + luaDropBlobs + luaTranscript + `
local nsub = tonumber(ARGV[15])
local msgs = {}
for j = 16 + nsub, #ARGV do msgs[#msgs + 1] = ARGV[j] end
local function fork()
  if redis.call('EXISTS', meta) == 1 then return {'conflict'} end
  if not staged(msgs) then return {'conflict'} end
  if ARGV[8] == '2' and redis.call('EXISTS', p .. 'stage:' .. ARGV[10]) == 0 then return {'conflict'} end
  local set = {}
  writetr({}, 0, 0, ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13], msgs, ARGV[1], ARGV[14], set)
  set[#set + 1] = 'par'; set[#set + 1] = ARGV[2]
  set[#set + 1] = 'fat'; set[#set + 1] = ARGV[3]
  if ARGV[4] ~= '' then set[#set + 1] = 'frun'; set[#set + 1] = ARGV[4] end
  redis.call('HSET', meta, unpack(set))
  if nsub > 0 then redis.call('SADD', p .. 'subj', unpack(ARGV, 16, 15 + nsub)) end
  return {'ok'}
end
local r = fork()
dropstages(msgs)
if ARGV[8] == '2' then redis.call('DEL', p .. 'stage:' .. ARGV[10]) end
return r
`)

// forkPoint reads a thread's fork fields from its meta hash.
func forkPoint(parent, at, run string) store.ForkPoint {
	n, _ := strconv.Atoi(at)
	return store.ForkPoint{Parent: parent, At: n, Run: run}
}

// ForkThread copies the parent's prefix into a new thread (store.Forks).
//
// The parent and the fork have hash tags of their own (two slots in a
// Cluster), so the copy cannot be one script. The parent is read as
// LoadThread reads it (one MULTI, then its large messages); the fork's
// audit index entries are added next (NX: an existing thread's entries
// are left alone), then one script on the fork's slot writes every key of
// the new thread, the meta last of all in the same step. A crash between
// the two leaves index entries without a thread, which ListThreads skips
// (as it skips a thread deleted since it was indexed), and no thread a
// reader can load. Large messages are copied into blob keys of the fork's
// own (staged as a transcript write stages them), so deleting either
// thread leaves the other whole.
func (s *Store) ForkThread(ctx context.Context, f store.Fork) (store.Thread, error) {
	t, err := store.ForkSource(ctx, &f, s.LoadThread)
	if err != nil {
		return store.Thread{}, err
	}
	now := s.now()
	ip := s.c.Pipeline()
	z := redis.ZAddArgs{NX: true, Members: []redis.Z{{Score: float64(now), Member: f.To.Thread}}}
	ip.ZAddArgs(ctx, s.tenantThreads(f.To.Tenant), z)
	z.Members = []redis.Z{{Score: float64(now), Member: f.To.Tenant + "/" + f.To.Thread}}
	ip.ZAddArgs(ctx, s.allThreads(), z)
	ip.SAdd(ctx, s.tenants(), f.To.Tenant)
	// The tenant's subject index names the fork before it exists, as the
	// audit index does (a crash leaves an entry an erasure finds nothing
	// behind); the fork's own subject set is written by the script.
	subIdx := make([]*redis.IntCmd, len(f.Subjects))
	for i, subject := range f.Subjects {
		subIdx[i] = ip.SAdd(ctx, s.subjectThreads(f.To.Tenant, subject), f.To.Thread)
	}
	if _, err := ip.Exec(ctx); err != nil {
		return store.Thread{}, mapErr(err)
	}
	b := s.batch(ctx)
	name := "fork-" + newAttempt()
	sys := sendSystem(&t)
	sys.blob = true // the script writes the blob: it has none to compare a sum with
	args := s.transcriptArgs(b, []any{now, f.From.Thread, f.At, f.Run}, f.To, name, &t, sys)
	args = append(args, len(f.Subjects))
	for _, subject := range f.Subjects {
		args = append(args, subject)
	}
	args = s.stage(b, f.To, name, t.Messages, args)
	cmd := b.script(forkScript, []string{s.meta(f.To)}, args...)
	if err := b.exec(s); err != nil {
		return store.Thread{}, mapErr(err)
	}
	if str(result(cmd.Val())[0]) != "ok" {
		// The thread that was there keeps only the subjects it had: take
		// back the index entries this fork added.
		rp := s.c.Pipeline()
		for i, c := range subIdx {
			if c.Val() == 1 {
				rp.SRem(ctx, s.subjectThreads(f.To.Tenant, f.Subjects[i]), f.To.Thread)
			}
		}
		if rp.Len() > 0 {
			if _, err := rp.Exec(ctx); err != nil {
				return store.Thread{}, mapErr(err)
			}
		}
		return store.Thread{}, fmt.Errorf("thread %s: exists: %w", f.To, store.ErrConflict)
	}
	return store.Thread{Key: f.To, Connection: t.Connection, Format: t.Format, Model: t.Model,
		System: t.System, Messages: t.Messages, Hashes: t.Hashes, Version: 1,
		CreatedAt: fromMS(strconv.FormatInt(now, 10)), UpdatedAt: fromMS(strconv.FormatInt(now, 10)),
		Fork: store.ForkPoint{Parent: f.From.Thread, At: f.At, Run: f.Run}}, nil
}
