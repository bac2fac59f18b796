package redisstore

import "github.com/redis/go-redis/v9"

// The thread scripts are built from the Lua pieces below, each taking
// only the ones it uses: a script's local functions are made anew on
// every call, so a helper a step does not need would cost every call its
// closure. KEYS[1] is always the thread's meta key; the other keys of the
// thread are derived from its prefix, so they share its hash slot.
const luaBase = `
local meta = KEYS[1]
local p = string.sub(meta, 1, -5)
`

const luaFenced = `
local function fenced(run, tok)
  local m = redis.call('HMGET', meta, 'l_run', 'l_tok')
  return m[1] ~= run or m[2] ~= tok
end
`

// luaEndlog ends a run's event log (the finish, and luaLost).
const luaEndlog = `
-- endlogof ends a run's event log with the marker "<n>-1" (field e) that
-- followers stop at, given the run's fields ev and fol. A run without
-- events has no log: it gets one only when a follower asked for it (the
-- run field 'fol', set by followScript before the follower blocks on the
-- log), so a turn that was not streamed creates no stream key.
local function endlogof(run, ret, ev, fol)
  local n = ev or '0'
  if n == '0' and not fol then return end
  local ek = p .. 'ev:' .. run
  redis.call('XADD', ek, n .. '-1', 'e', '1')
  redis.call('PEXPIRE', ek, ret)
end
`

// luaLost fails a run whose lease expired (the sweeper and a start that
// finds the lease expired); it needs luaEndlog.
const luaLost = `
local function lost(run, now, ret)
  local rk = p .. 'run:' .. run
  local m = redis.call('HMGET', meta, 'l_run', 'nruns')
  if m[1] == run then redis.call('HDEL', meta, 'l_run', 'l_own', 'l_tok', 'l_exp') end
  local st = redis.call('HMGET', rk, 'st', 'n', 'ev', 'fol')
  if st[1] ~= 'running' then return false end
  redis.call('HSET', rk, 'st', 'failed', 'reason', 'proxy_lost', 'fin', now)
  if st[2] == m[2] then redis.call('HSET', meta, 'last', 'failed') end
  endlogof(run, ret, st[3], st[4])
  return true
end
`

// luaAppendBatch appends a batch of events to a run's log (the append
// and a finish that carries the log's last batch).
const luaAppendBatch = `
-- appendbatch appends events first … first+count-1 of the run, packed as
-- "<length>:<event>…" (eventsBatch), to its log, whose count is n: one
-- stream entry, id "<last>-0", field 'b'. Events already stored (a batch
-- sent again) are skipped; maxlen trims by sequence (MINID), so a log
-- keeps at least its newest maxlen events (a batch that straddles the
-- limit is kept whole). It returns the log's count after, or nil for a
-- gap (nothing written). The caller records the count (the run field
-- 'ev') and the log's expiry.
local function appendbatch(run, n, first, count, batch, maxlen)
  if first > n + 1 then return nil end
  local last = first + count - 1
  if last <= n then return n end
  if first <= n then
    local pos = 1
    for _ = first, n do
      local c = string.find(batch, ':', pos, true)
      pos = c + 1 + tonumber(string.sub(batch, pos, c - 1))
    end
    batch = string.sub(batch, pos)
  end
  local ek = p .. 'ev:' .. run
  local id = string.format('%d-0', last)
  if maxlen > 0 and last > maxlen then
    redis.call('XADD', ek, 'MINID', string.format('%d', last - maxlen + 1), id, 'b', batch)
  else
    redis.call('XADD', ek, id, 'b', batch)
  end
  return last
end
`

const luaDropBlobs = `
local function dropblobs(from)
  if not redis.call('HGET', meta, 'nblob') then return end
  for _, m in ipairs(redis.call('LRANGE', p .. 'msgs', from, -1)) do
    if string.byte(m, 1) == 0 then redis.call('DEL', p .. 'blob:' .. string.sub(m, 2)) end
  end
end
`

// luaTranscript checks and applies a transcript write (the save and the
// finish); it needs luaDropBlobs.
const luaTranscript = `
-- metaof reads, in one HMGET, the meta fields that a transcript write
-- and a finish decide on, as an array (a table of named fields would cost
-- each call its hash part): 1 l_run, 2 l_tok, 3 syssum, 4 created,
-- 5 updated, 6 nruns, 7 v, 8 the legacy 'sys' field, 9 dg. They write
-- what they change with one HSET at the end (the accumulated 'set'), so
-- none is read twice. (A field the hash does not have costs a scan of
-- it whole, so fields needed only now and then are read when needed:
-- 'nblob' by dropblobs; and the usage sums go by HINCRBY, cheaper than
-- reading them here and adding in Lua, on a listpack meta and on a hash
-- table one alike.)
local function metaof()
  return redis.call('HMGET', meta, 'l_run', 'l_tok', 'syssum', 'created', 'updated', 'nruns', 'v', 'sys', 'dg')
end
-- checktr returns the stored message count when a write that keeps the
-- first keep messages (the last of which hashes to keephash) fits the
-- stored transcript, false when it does not; and whether the stored
-- transcript is known to be the one the write was computed against.
--
-- base is the Digest of that one (store.Transcript.BaseDigest) and basen
-- its message count, or ''. When the meta field 'dg' names the thread's
-- version and base, the stored hashes are exactly the writer's (dg is
-- kept only by writers that know the digest, and goes stale when any
-- other write moves v on): the count is basen and the kept prefix is the
-- writer's, so neither the list's length nor the hash blob is read.
-- Otherwise (no base, a stale or missing dg: an older chronicle wrote
-- last, or the writer's view is out of date) both are read and checked.
local function checktr(mt, keep, keephash, base, basen)
  if base ~= '' and mt[9] and mt[7] and mt[9] == mt[7] .. ':' .. base then
    local n = tonumber(basen)
    if keep > n then return false end
    return n, true
  end
  local n = redis.call('LLEN', p .. 'msgs')
  if keep > n then return false end
  if keep > 0 and redis.call('GETRANGE', p .. 'hashes', (keep - 1) * 16, keep * 16 - 1) ~= keephash then return false end
  return n, false
end
-- A large message is not a script argument: a transcript write passes
-- '\0' .. name for it, and the message waits in the key p .. 'stage:' ..
-- name, written by a plain SET ahead of the script. Applying the write
-- renames the stage to the blob key p .. 'blob:' .. id and lists
-- '\0' .. id in its place; readers fetch blobs with MGET.
local function staged(msgs)
  for _, m in ipairs(msgs) do
    if string.byte(m, 1) == 0 and redis.call('EXISTS', p .. 'stage:' .. string.sub(m, 2)) == 0 then return false end
  end
  return true
end
-- dropstages deletes what a write staged and did not use (a refused or
-- repeated write); every script that takes staged messages ends with it.
local function dropstages(msgs)
  for _, m in ipairs(msgs) do
    if string.byte(m, 1) == 0 then redis.call('DEL', p .. 'stage:' .. string.sub(m, 2)) end
  end
end
-- The thread's system blob lives in the key p .. 'sys', its SHA-256 in
-- the meta field 'syssum' (threads written before kept the blob itself in
-- the meta field 'sys'; their next write moves it). A transcript write
-- passes hassys '0' (no system), '1' (sys is the blob), '2' (the blob is
-- staged, sys names the stage) or '3' (only the sum: the writer expects
-- the stored blob to be that one). Scripts compare sums, so a blob is
-- neither an argument nor read into Lua once it is stored.
--
-- sysready checks a write's system before anything is written: 'needsys'
-- when a '3' write's sum is not the stored one (the writer then sends the
-- blob), 'conflict' when a staged blob is missing.
local function sysready(mt, hassys, syssum, sys)
  if hassys == '3' and (mt[3] ~= syssum or mt[8]) then
    return 'needsys'
  end
  if hassys == '2' and redis.call('EXISTS', p .. 'stage:' .. sys) == 0 then return 'conflict' end
  return nil
end
-- writetr applies a checked transcript (checktr, which gave n, staged,
-- sysready) to the thread whose meta mt holds; a write that is already
-- applied (a retry) changes nothing. The meta fields it changes go to set
-- (field, value, …), for the caller's HSET. It returns the thread's
-- 'updated' after the write.
--
-- dg is the SHA-1 of the whole hash blob after the write when the writer
-- knows it (store.Transcript.Digest), else ''. It is kept as the meta
-- field 'dg', "<v>:<digest>", so a start that knows the digest compares
-- it without reading the blob; it holds only while v is the version it
-- names (a writer that does not know it, or an older chronicle's, moves v
-- on and leaves it stale).
--
-- known (checktr's second result) says the stored hashes are the ones
-- base names: the write then repeats them exactly when dg is base, and
-- nothing of the blob is read. (The fork passes neither.)
local function writetr(mt, n, keep, hashblob, hassys, syssum, sys, conn, fmt, model, msgs, now, dg, set, known, base)
  local mk, hk = p .. 'msgs', p .. 'hashes'
  local oldsys = mt[8]
  local syssame = not oldsys and ((hassys == '0' and not mt[3]) or (hassys ~= '0' and mt[3] == syssum))
  local same = syssame and mt[4] and n == keep + #msgs
  if same then
    if known then
      same = dg ~= '' and dg == base
    else
      same = redis.call('GETRANGE', hk, keep * 16, -1) == hashblob
    end
  end
  if not same then
    -- A write that replaces the stored tail with at least as many
    -- messages (a replace turn's new answer) overwrites it in place:
    -- LSET and SETRANGE instead of cutting list and blob and appending.
    local over = 0
    if keep < n then
      dropblobs(keep)
      if keep + #msgs >= n and n - keep <= 8 then
        over = n - keep
      elseif keep == 0 then
        redis.call('DEL', mk)
      else
        redis.call('LTRIM', mk, 0, keep - 1)
      end
    end
    for i, m in ipairs(msgs) do
      if string.byte(m, 1) == 0 then
        local id = redis.call('HINCRBY', meta, 'nblob', 1)
        local bk = p .. 'blob:' .. id
        redis.call('RENAME', p .. 'stage:' .. string.sub(m, 2), bk)
        redis.call('PERSIST', bk)
        msgs[i] = '\0' .. id
      end
    end
    -- (the blob holds 16 bytes per listed message)
    if over > 0 then
      for i = 1, over do redis.call('LSET', mk, keep + i - 1, msgs[i]) end
      redis.call('SETRANGE', hk, keep * 16, hashblob)
    elseif keep == 0 then
      redis.call('DEL', hk)
    elseif keep < n then
      redis.call('SET', hk, redis.call('GETRANGE', hk, 0, keep * 16 - 1))
    end
    for i = over + 1, #msgs, 1000 do
      redis.call('RPUSH', mk, unpack(msgs, i, math.min(i + 999, #msgs)))
    end
    if #msgs > 0 and over == 0 then redis.call('APPEND', hk, hashblob) end
    if not syssame then
      if hassys == '0' then
        redis.call('DEL', p .. 'sys')
        redis.call('HDEL', meta, 'syssum')
      else
        if hassys == '2' then
          redis.call('RENAME', p .. 'stage:' .. sys, p .. 'sys')
          redis.call('PERSIST', p .. 'sys')
        else -- '1' ('3' is the stored blob: sysready)
          redis.call('SET', p .. 'sys', sys)
        end
        set[#set + 1] = 'syssum'; set[#set + 1] = syssum
      end
      if oldsys then redis.call('HDEL', meta, 'sys') end
    end
    local v = string.format('%d', (tonumber(mt[7]) or 0) + 1)
    set[#set + 1] = 'v'; set[#set + 1] = v
    if dg ~= '' then set[#set + 1] = 'dg'; set[#set + 1] = v .. ':' .. dg end
    if not mt[4] then set[#set + 1] = 'created'; set[#set + 1] = now end
    set[#set + 1] = 'updated'; set[#set + 1] = now
  end
  if conn ~= '' then set[#set + 1] = 'conn'; set[#set + 1] = conn end
  if fmt ~= '' then set[#set + 1] = 'fmt'; set[#set + 1] = fmt end
  if model ~= '' then set[#set + 1] = 'model'; set[#set + 1] = model end
  if same then return mt[5] end
  return now
end
`

// startScript: KEYS meta [, tenant run index, sweeper index]; ARGV run,
// owner, exp, now, fp, record (the run's start fields no script reads,
// packed: see record.go), retention, load, known digest, thread,
// tenant/thread (both empty on a cluster), attempt.
// Returns {'conflict'} | {'exists', runfields, intr, [thread]} |
// {'held', run, tok, exp, owner} | {'ok', tok, lostrun, prevlast, [thread]}
// | {'taken'}
// where thread (when load is '1') is the meta fields threadFields names
// (HMGET, in that order), messages, hash blob and
// 'same' or ”, read in the same step as the lease; when the stored
// transcript's digest is the known one, messages and blob are left out
// ({}, ”) and the last value is 'same'. The digest is the meta field 'dg'
// while it names the thread's version (writetr), else the SHA-1 of the
// hash blob.
//
// attempt is unique per StartRun call, and kept on the run it creates. The
// same script sent again with the same arguments (go-redis retries a
// command whose reply a timeout or a broken connection lost, though the
// script may have run) finds its own run: while that run still holds the
// lease it created, the reply is the 'ok' the first run would have given,
// not 'exists', so the caller drives the run it started instead of
// following it as someone else's.
//
// With the two index keys (a single node, where every key is reachable
// from one script) it also claims the run id and registers the run for
// the sweeper, first: {'taken'} when another thread has the run id
// (nothing written), and a start refused as held undoes both. Without
// them (a cluster, where those keys live on other slots) StartRun sends
// the claim and the sweeper entry as commands of their own.
var startScript = redis.NewScript(luaBase + luaEndlog + luaLost + `
-- metaEncoding is the value of the meta field 'enc', which every start
-- writes when the hash lacks it. A turn reads and writes about 30 fields
-- of the meta hash, which holds about 20. Redis keeps a hash that small
-- as a listpack, where every field lookup scans the hash from its start;
-- a value longer than hash-max-listpack-value (64 bytes by default) makes
-- it a hash table, for good (a restart or a migration keeps it one, as
-- the value is still that long), whose lookups do not scan. That costs
-- the hash about 0.7 KiB and saves the server about a tenth of the
-- instructions of a turn (store/README.md, "What a turn costs the
-- server"). The field is nothing else; older releases ignore it.
local metaEncoding = 'hashtable: a value longer than hash-max-listpack-value keeps this hash out of the listpack encoding'
-- thread adds the thread to a reply when it is to be loaded (load is not
-- '0'); f is its meta fields when the caller read them already (start
-- reads them with the lease's): threadFields, then 'dg'.
local function thread(out, load, known, f)
  if load == '0' then return out end
  f = f or redis.call('HMGET', meta, 'created', 'updated', 'v', 'conn', 'fmt', 'model', 'sys', 'dg')
  local dg = f[8]
  f[8] = nil
  if load == '1' then
    f[7] = redis.call('GET', p .. 'sys') or f[7]
  else
    f[7] = false
  end
  out[#out + 1] = f
  if known ~= '' and dg and f[3] and dg == f[3] .. ':' .. known then
    out[#out + 1] = {}
    out[#out + 1] = ''
    out[#out + 1] = 'same'
    return out
  end
  local hb = redis.call('GET', p .. 'hashes') or ''
  if known ~= '' and redis.sha1hex(hb) == known then
    out[#out + 1] = {}
    out[#out + 1] = ''
    out[#out + 1] = 'same'
  else
    out[#out + 1] = redis.call('LRANGE', p .. 'msgs', 0, -1)
    out[#out + 1] = hb
    out[#out + 1] = ''
  end
  return out
end
-- start keeps its arguments in locals of its own (a closure's upvalues
-- cost each call a lookup apiece).
local function start()
  local run, exp, now, fp, ret, load, known = ARGV[1], ARGV[3], tonumber(ARGV[4]), ARGV[5], ARGV[7], ARGV[8], ARGV[9]
  local rk = p .. 'run:' .. run
  local ex = redis.call('HGET', rk, 'fp')
  if ex then
    if ex ~= fp then return {'conflict'} end
    local own = redis.call('HMGET', rk, 'att', 'st', 'ltok', 'plast')
    if ARGV[12] ~= '' and own[1] == ARGV[12] and own[2] == 'running' then
      local l = redis.call('HMGET', meta, 'l_run', 'l_tok')
      if l[1] == run and l[2] == own[3] then
        return thread({'ok', own[3], '', own[4] or ''}, load, known)
      end
    end
    local h = redis.call('HGETALL', rk)
    local r = {}
    for j = 1, #h, 2 do
      if h[j] ~= 'resp' and h[j] ~= 'up' then r[#r + 1] = h[j]; r[#r + 1] = h[j + 1] end
    end
    return thread({'exists', r, redis.call('HGETALL', p .. 'intr')}, load, known)
  end
  -- A field the meta hash does not have costs a scan of it whole, so
  -- the lease's other fields are read only when it has one (l_run), and
  -- the legacy 'sys' only for a load that wants the system blob.
  -- (e: where 'enc' is, see metaEncoding)
  local m, e
  if load == '1' then
    m, e = redis.call('HMGET', meta, 'l_run', 'last', 'l_seq', 'nruns', 'created', 'updated', 'v', 'conn', 'fmt', 'model', 'dg', 'sys', 'enc'), 13
  elseif load == '2' then
    m, e = redis.call('HMGET', meta, 'l_run', 'last', 'l_seq', 'nruns', 'created', 'updated', 'v', 'conn', 'fmt', 'model', 'dg', 'enc'), 12
  else
    m, e = redis.call('HMGET', meta, 'l_run', 'last', 'l_seq', 'nruns', 'enc'), 5
  end
  local lostrun = ''
  if m[1] then
    local l = redis.call('HMGET', meta, 'l_tok', 'l_exp', 'l_own')
    if tonumber(l[2]) > now then return {'held', m[1], l[1], l[2], l[3] or ''} end
    if lost(m[1], now, ret) then
      lostrun = m[1]
      m[2] = redis.call('HGET', meta, 'last')
    end
  end
  local prevlast = m[2] or ''
  local tok = string.format('%d', tonumber(m[3] or '0') + 1)
  local n = string.format('%d', tonumber(m[4] or '0') + 1)
  if m[e] then
    redis.call('HSET', meta, 'l_run', run, 'l_tok', tok, 'l_own', ARGV[2], 'l_exp', exp, 'last', 'running', 'l_seq', tok, 'nruns', n)
  else
    redis.call('HSET', meta, 'l_run', run, 'l_tok', tok, 'l_own', ARGV[2], 'l_exp', exp, 'last', 'running', 'l_seq', tok, 'nruns', n, 'enc', metaEncoding)
  end
  -- A run's fields that scripts read stay fields of their own; the rest
  -- is one packed field (record.go).
  redis.call('HSET', rk, 'st', 'running', 'fp', fp, 'ltok', tok, 'n', n, 'att', ARGV[12], 'plast', prevlast, 's', ARGV[6])
  redis.call('ZADD', p .. 'runs', n, run)
  -- Starting a run changes none of the thread's own fields.
  if load == '0' then return {'ok', tok, lostrun, prevlast} end
  return thread({'ok', tok, lostrun, prevlast}, load, known, {m[5], m[6], m[7], m[8], m[9], m[10], m[12] or false, m[11]})
end
if not KEYS[2] then return start() end
local run, thr = ARGV[1], ARGV[10]
local member = ARGV[11] .. '/' .. run
local claimed = false
if redis.call('HSETNX', KEYS[2], run, thr) == 0 then
  if redis.call('HGET', KEYS[2], run) ~= thr then return {'taken'} end
  claimed = true
end
redis.call('ZADD', KEYS[3], 'NX', ARGV[3], member)
local r = start()
if r[1] == 'held' then
  redis.call('ZREM', KEYS[3], member)
  if not claimed then redis.call('HDEL', KEYS[2], run) end
elseif r[1] == 'ok' and r[3] ~= '' then
  redis.call('ZREM', KEYS[3], ARGV[11] .. '/' .. r[3])
end
return r
`)

// unstartScript takes back a run StartRun just created, when the run id
// turned out to belong to another thread: the run, its lease and its count
// go; the token sequence keeps growing. ARGV run, tok, prevlast.
var unstartScript = redis.NewScript(luaBase + luaFenced + `
local run = ARGV[1]
if fenced(run, ARGV[2]) then return 0 end
local rk = p .. 'run:' .. run
if redis.call('HGET', rk, 'st') ~= 'running' then return 0 end
redis.call('DEL', rk, p .. 'ev:' .. run)
redis.call('ZREM', p .. 'runs', run)
redis.call('HDEL', meta, 'l_run', 'l_own', 'l_tok', 'l_exp')
redis.call('HINCRBY', meta, 'nruns', -1)
if ARGV[3] == '' then redis.call('HDEL', meta, 'last') else redis.call('HSET', meta, 'last', ARGV[3]) end
return 1
`)

// scripts are loaded into the server's cache at Open.
var scripts = []*redis.Script{startScript, unstartScript, runIDScript, unclaimScript, saveScript, renewScript,
	releaseScript, finishScript, appendScript, lostScript, followScript, cancelScript, listRunsScript, deleteScript, unindexScript, forkScript}

// runIDScript claims a run id for a thread in the tenant's run index.
// KEYS[1] tenant run index; ARGV run, thread. Returns 0 (another thread
// has it), 1 (this thread had it), 2 (claimed now).
var runIDScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then
  if v ~= ARGV[2] then return 0 end
  return 1
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 2
`)

// unclaimScript drops a run id claim if it still names the thread.
var unclaimScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 1
`)

// saveScript: ARGV run, tok, now, keep, keephash, hashblob, hassys,
// syssum, sys, conn, fmt, model, digest, base digest, base count, msgs…
// Returns {'fenced'} |
// {'conflict'} | {'needsys'} | {'ok', updated}.
var saveScript = redis.NewScript(luaBase + luaDropBlobs + luaTranscript + `
local keep = tonumber(ARGV[4])
local msgs = {}
for j = 16, #ARGV do msgs[#msgs + 1] = ARGV[j] end
local function save()
  local mt = metaof()
  if mt[1] ~= ARGV[1] or mt[2] ~= ARGV[2] then return {'fenced'} end
  local n, known = checktr(mt, keep, ARGV[5], ARGV[14], ARGV[15])
  if not n or not staged(msgs) then return {'conflict'} end
  local sr = sysready(mt, ARGV[7], ARGV[8], ARGV[9])
  if sr then return {sr} end
  local set = {}
  local updated = writetr(mt, n, keep, ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], msgs, ARGV[3], ARGV[13], set, known, ARGV[14])
  if #set > 0 then redis.call('HSET', meta, unpack(set)) end
  return {'ok', updated}
end
local r = save()
dropstages(msgs)
if ARGV[7] == '2' then redis.call('DEL', p .. 'stage:' .. ARGV[9]) end
return r
`)

// renewScript: ARGV run, tok, exp, hasPartial, partial, detached.
// Returns {'fenced'} | {'ok', cancel}.
var renewScript = redis.NewScript(luaBase + luaFenced + `
local run = ARGV[1]
if fenced(run, ARGV[2]) then return {'fenced'} end
local rk = p .. 'run:' .. run
if redis.call('HGET', rk, 'st') ~= 'running' then return {'fenced'} end
redis.call('HSET', meta, 'l_exp', ARGV[3])
redis.call('HSET', rk, 'lexp', ARGV[3])
if ARGV[4] == '1' then redis.call('HSET', rk, 'partial', ARGV[5]) end
if ARGV[6] ~= '' then redis.call('HSET', rk, 'det', ARGV[6]) end
return {'ok', redis.call('HGET', rk, 'cancel') or ''}
`)

// releaseScript: ARGV run, tok.
var releaseScript = redis.NewScript(luaBase + luaFenced + `
if fenced(ARGV[1], ARGV[2]) then return 0 end
redis.call('HDEL', meta, 'l_run', 'l_own', 'l_tok', 'l_exp')
return 1
`)

// finishScript: KEYS meta [, tenant thread index, thread index, tenant
// set, sweeper index]; ARGV [thread, tenant, tenant/thread,] then the
// values Finish lists. Returns {'ok', updated} | {'fenced'} |
// {'notfound'} | {'resumenotfound'} | {'illegal', status} | {'conflict'}.
//
// The run's fields that no script reads (reason, times, usage, error,
// audit lists, session id) come packed as one value, record (record.go),
// and are written as the field 'f'; usage and model come apart as well,
// for the thread's sums and model.
//
// With the index keys (a single node) it also does what Finish otherwise
// sends as commands of their own: on 'ok' it moves the thread up the
// audit indexes (see queueIndex) and drops the sweeper entry; a run it
// did not find leaves the sweeper too, and a refused finish leaves the
// run to the sweeper, due now.
var finishScript = redis.NewScript(luaBase + luaEndlog + luaDropBlobs + luaTranscript + luaAppendBatch + `
-- ARGV past the index prefix (o: 3 with the index keys, else 0): o+1 run,
-- tok, now, status, record, input, output, cached and reasoning tokens,
-- model, o+11 response flag and value, o+13 retention, o+14 transcript
-- flag, keep, keep hash, hash blob, hassys, syssum, sys, conn, fmt,
-- model, digest, o+25 base digest, base count (see checktr), o+27 the
-- log's last batch ('' or "<first>:<count>:<maxlen>:" and the events as
-- the append script takes them), o+28 the rare arguments' flag: '1' when
-- they follow (partial flag and value,
-- upstream flag and value, resumes, the interrupts' count and pairs, the
-- resolved ones' count and ids, the cancelled ones' count and ids), ''
-- when they do not (none of them: each would cost every finish its
-- conversion into Lua), then the messages. finish keeps everything in
-- locals of its own (a closure's upvalues cost each call a lookup apiece)
-- and returns its reply, the messages and whether it created the thread.
local function finish(o)
  local run, tok, now, status, rec = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4], ARGV[o + 5]
  local i = o + 29
  -- (the interrupt lists only when the rare arguments come: a table is
  -- made, and collected, on every call)
  local intr, res, can
  local msgs = {}
  local partf, partial, upf, up, resumes = '0', '', '0', '', ''
  if ARGV[o + 28] == '1' then
    intr, res, can = {}, {}, {}
    partf, partial, upf, up, resumes = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
    i = i + 5
    for j = 1, tonumber(ARGV[i]) do intr[j] = {ARGV[i + 2 * j - 1], ARGV[i + 2 * j]} end
    i = i + 1 + 2 * #intr
    for j = 1, tonumber(ARGV[i]) do res[j] = ARGV[i + j] end
    i = i + 1 + #res
    for j = 1, tonumber(ARGV[i]) do can[j] = ARGV[i + j] end
    i = i + 1 + #can
  end
  for j = i, #ARGV do msgs[#msgs + 1] = ARGV[j] end
  local rk = p .. 'run:' .. run
  local st = redis.call('HMGET', rk, 'st', 'ltok', 'reason', 'n', 'ev', 'fol')
  if not st[1] then return {'notfound'}, msgs end
  -- A run swept as proxy_lost while its replica could not reach the
  -- store (its finish was spooled) is revived by that finish, as long as
  -- no lease was taken on the thread since its own: nothing newer was
  -- written, so the finish overwrites no history.
  local revived = false
  if st[1] ~= 'running' then
    if st[1] == 'failed' and st[3] == 'proxy_lost' and st[2] == tok then
      local lm = redis.call('HMGET', meta, 'l_run', 'l_seq')
      if lm[1] or lm[2] ~= tok then return {'fenced'}, msgs end
      revived = true
    else
      if st[2] ~= tok or st[3] == 'proxy_lost' then return {'fenced'}, msgs end
      if st[1] == status then return {'ok', redis.call('HGET', meta, 'updated') or ''}, msgs end
      return {'illegal', st[1]}, msgs
    end
  end
  local mt = metaof()
  if not revived and (mt[1] ~= run or mt[2] ~= tok) then return {'fenced'}, msgs end
  local prk
  if resumes ~= '' then
    prk = p .. 'run:' .. resumes
    local pv = redis.call('HMGET', prk, 'st', 'rby')
    if not pv[1] then return {'resumenotfound'}, msgs end
    if pv[1] ~= 'interrupted' or (pv[2] and pv[2] ~= run) then return {'illegal', pv[1]}, msgs end
  end
  local respf, resp = ARGV[o + 11], ARGV[o + 12]
  if respf == '2' and redis.call('EXISTS', p .. 'stage:' .. resp) == 0 then return {'conflict'}, msgs end
  if upf == '2' and redis.call('EXISTS', p .. 'stage:' .. up) == 0 then return {'conflict'}, msgs end
  -- Meta fields to set, in one HSET at the end (a field set twice takes
  -- its last value).
  local mset = {}
  local updated = mt[5] or ''
  local trf, created = ARGV[o + 14], false
  if trf == '1' then
    local base = ARGV[o + 25]
    local n, known = checktr(mt, tonumber(ARGV[o + 15]), ARGV[o + 16], base, ARGV[o + 26])
    if not n or not staged(msgs) then return {'conflict'}, msgs end
    local hassys, syssum, sys = ARGV[o + 18], ARGV[o + 19], ARGV[o + 20]
    local sr = sysready(mt, hassys, syssum, sys)
    if sr then return {sr}, msgs end
    updated = writetr(mt, n, tonumber(ARGV[o + 15]), ARGV[o + 17], hassys, syssum, sys, ARGV[o + 21], ARGV[o + 22], ARGV[o + 23], msgs, now, ARGV[o + 24], mset, known, base)
    created = not mt[4]
  end
  -- The log's last batch (Finish.Events), appended as the append script
  -- would, in this step: a gap drops it, not the finish. (A revived run's
  -- sweep ended its log.) ev is the log's count after it.
  local ev, evs, evset = st[5], ARGV[o + 27], false
  if evs ~= '' and not revived then
    local c1 = string.find(evs, ':', 1, true)
    local c2 = string.find(evs, ':', c1 + 1, true)
    local c3 = string.find(evs, ':', c2 + 1, true)
    local n = tonumber(ev or '0')
    local last = appendbatch(run, n, tonumber(string.sub(evs, 1, c1 - 1)), tonumber(string.sub(evs, c1 + 1, c2 - 1)),
      string.sub(evs, c3 + 1), tonumber(string.sub(evs, c2 + 1, c3 - 1)))
    if last and last > n then ev = string.format('%d', last); evset = true end
  end
  -- A body flagged '2' was staged (like a large message): it moves to a
  -- key of the run's own, and its field says so with '\0'.
  if respf == '2' then
    redis.call('RENAME', p .. 'stage:' .. resp, rk .. ':resp')
    redis.call('PERSIST', rk .. ':resp')
    resp = '\0'
  end
  -- The record ends with the thread's message count after the finish
  -- (recEnd, Run.End): the transcript as the run left it.
  local e
  if trf == '1' then e = tonumber(ARGV[o + 15]) + #msgs else e = redis.call('LLEN', p .. 'msgs') end
  e = string.format('%d', e)
  rec = rec .. 'E' .. #e .. ':' .. e
  -- The run is running (or revived), so no finish has written its fields
  -- before; a revived run's sweep wrote a reason and a time of its own.
  if respf == '0' then
    if evset then
      redis.call('HSET', rk, 'st', status, 'f', rec, 'ev', ev)
    else
      redis.call('HSET', rk, 'st', status, 'f', rec)
    end
  elseif evset then
    redis.call('HSET', rk, 'st', status, 'f', rec, 'resp', resp, 'ev', ev)
  else
    redis.call('HSET', rk, 'st', status, 'f', rec, 'resp', resp)
  end
  if revived then redis.call('HDEL', rk, 'reason', 'fin') end
  if partf == '1' then redis.call('HSET', rk, 'partial', partial) end
  if upf == '2' then
    redis.call('RENAME', p .. 'stage:' .. up, rk .. ':up')
    redis.call('PERSIST', rk .. ':up')
    redis.call('HSET', rk, 'up', '\0')
  elseif upf == '1' then
    redis.call('HSET', rk, 'up', up)
  end
  -- (four statements: a table of the names would be made on every call)
  if ARGV[o + 6] ~= '0' then redis.call('HINCRBY', meta, 'ui', ARGV[o + 6]) end
  if ARGV[o + 7] ~= '0' then redis.call('HINCRBY', meta, 'uo', ARGV[o + 7]) end
  if ARGV[o + 8] ~= '0' then redis.call('HINCRBY', meta, 'uc', ARGV[o + 8]) end
  if ARGV[o + 9] ~= '0' then redis.call('HINCRBY', meta, 'ur', ARGV[o + 9]) end
  if intr and (#intr > 0 or #res > 0 or #can > 0) then
    local ik = p .. 'intr'
    for _, c in ipairs(intr) do
      redis.call('HSET', ik, c[1], 'pending\31' .. run .. '\31' .. c[2])
    end
    for _, set in ipairs({{res, 'resolved'}, {can, 'cancelled'}}) do
      for _, id in ipairs(set[1]) do
        local v = redis.call('HGET', ik, id)
        if v and string.sub(v, 1, 8) == 'pending\31' then
          redis.call('HSET', ik, id, set[2] .. string.sub(v, 8))
        end
      end
    end
  end
  if prk then redis.call('HSET', prk, 'rby', run) end
  redis.call('HDEL', meta, 'l_run', 'l_own', 'l_tok', 'l_exp')
  local model = ARGV[o + 10]
  if model ~= '' then mset[#mset + 1] = 'model'; mset[#mset + 1] = model end
  if mt[6] == st[4] then mset[#mset + 1] = 'last'; mset[#mset + 1] = status end
  -- A thread that was ever written (created, now or before) records the
  -- finish's time.
  if mt[4] or trf == '1' then mset[#mset + 1] = 'updated'; mset[#mset + 1] = now; updated = now end
  if #mset > 0 then redis.call('HSET', meta, unpack(mset)) end
  -- The sweep ended a revived run's event log already.
  if not revived then endlogof(run, ARGV[o + 13], ev, st[6]) end
  return {'ok', updated}, msgs, created
end
local o = 0
if KEYS[2] then o = 3 end
local r, msgs, created = finish(o)
if #msgs > 0 then dropstages(msgs) end
-- What a write staged and did not use goes (a used stage was renamed).
if ARGV[o + 11] == '2' then redis.call('DEL', p .. 'stage:' .. ARGV[o + 12]) end
if ARGV[o + 28] == '1' and ARGV[o + 31] == '2' then redis.call('DEL', p .. 'stage:' .. ARGV[o + 32]) end
if ARGV[o + 18] == '2' then redis.call('DEL', p .. 'stage:' .. ARGV[o + 20]) end
-- needsys wrote nothing: the writer sends the finish again with the blob.
if o == 0 or r[1] == 'needsys' then return r end
local thr, tenant, tt, now = ARGV[1], ARGV[2], ARGV[3], ARGV[o + 3]
local member = tt .. '/' .. ARGV[o + 1]
if r[1] == 'ok' then
  if ARGV[o + 14] == '1' then
    redis.call('ZADD', KEYS[2], 'GT', now, thr)
    redis.call('ZADD', KEYS[3], 'GT', now, tt)
    -- A thread joins its tenant's set when it is created.
    if created then redis.call('SADD', KEYS[4], tenant) end
  else
    redis.call('ZADD', KEYS[2], 'XX', 'GT', now, thr)
    redis.call('ZADD', KEYS[3], 'XX', 'GT', now, tt)
  end
  redis.call('ZREM', KEYS[5], member)
elseif r[1] == 'notfound' then
  redis.call('ZREM', KEYS[5], member)
else
  redis.call('ZADD', KEYS[5], 0, member)
end
return r
`)

// appendScript: ARGV run, tok, first, retention, maxlen, count, batch
// (the events packed as "<length>:<event>…", eventsBatch). Returns {'ok'}
// | {'fenced'} | {'gap', n}.
//
// A batch is one stream entry, id "<last seq>-0", field 'b': an entry per
// event cost the server an XADD (and its call) each, most of a streamed
// turn's cost. Events already stored (a batch sent again) are skipped;
// logs written before hold an entry per event (field 'd'). maxlen trims
// by sequence (MINID), so a log keeps at least its newest maxlen events:
// a batch that straddles the limit is kept whole.
var appendScript = redis.NewScript(luaBase + luaFenced + luaAppendBatch + `
local run = ARGV[1]
if fenced(run, ARGV[2]) then return {'fenced'} end
local rk = p .. 'run:' .. run
local st = redis.call('HMGET', rk, 'st', 'ev')
if st[1] ~= 'running' then return {'fenced'} end
local n = tonumber(st[2] or '0')
local last = appendbatch(run, n, tonumber(ARGV[3]), tonumber(ARGV[6]), ARGV[7], tonumber(ARGV[5]))
if not last then return {'gap', tostring(n)} end
if last > n then
  redis.call('HSET', rk, 'ev', string.format('%d', last))
  redis.call('PEXPIRE', p .. 'ev:' .. run, ARGV[4])
end
return {'ok'}
`)

// lostScript: ARGV run, now, retention. Returns {'gone'} | {'alive', exp} |
// {'lost'}.
var lostScript = redis.NewScript(luaBase + luaEndlog + luaLost + `
local run, now = ARGV[1], tonumber(ARGV[2])
if redis.call('HGET', p .. 'run:' .. run, 'st') ~= 'running' then return {'gone'} end
local m = redis.call('HMGET', meta, 'l_run', 'l_exp')
if m[1] == run and tonumber(m[2]) > now then return {'alive', m[2]} end
lost(run, now, ARGV[3])
return {'lost'}
`)

// followScript: KEYS run. Returns the run's status (nil: no run) and, for
// a running run, sets its field 'fol', so that its finish writes the end
// marker of its event log even when it has no events (endlog).
var followScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'st')
if st == 'running' then redis.call('HSET', KEYS[1], 'fol', '1') end
return st
`)

// cancelScript: ARGV run. Returns 0 if the run does not exist.
var cancelScript = redis.NewScript(luaBase + `
local rk = p .. 'run:' .. ARGV[1]
local st = redis.call('HGET', rk, 'st')
if not st then return 0 end
if st == 'running' then redis.call('HSET', rk, 'cancel', '1') end
return 1
`)

// listRunsScript returns {intr…, {id, fields…}…} without response or
// upstream bodies.
var listRunsScript = redis.NewScript(luaBase + `
if redis.call('EXISTS', meta) == 0 then return false end
local out = {redis.call('HGETALL', p .. 'intr')}
for _, id in ipairs(redis.call('ZRANGE', p .. 'runs', 0, -1)) do
  local h = redis.call('HGETALL', p .. 'run:' .. id)
  local r = {id}
  for j = 1, #h, 2 do
    if h[j] ~= 'resp' and h[j] ~= 'up' then r[#r + 1] = h[j]; r[#r + 1] = h[j + 1] end
  end
  out[#out + 1] = r
end
return out
`)

// unindexScript drops a deleted thread from the indexes on a single node,
// in one step: KEYS tenant run index, sweeper index, tenant thread index,
// thread index, tenant set; ARGV thread, tenant, the thread's runs…
var unindexScript = redis.NewScript(`
local thr, tenant = ARGV[1], ARGV[2]
for j = 3, #ARGV do
  if redis.call('HGET', KEYS[1], ARGV[j]) == thr then redis.call('HDEL', KEYS[1], ARGV[j]) end
  redis.call('ZREM', KEYS[2], tenant .. '/' .. thr .. '/' .. ARGV[j])
end
redis.call('ZREM', KEYS[3], thr)
redis.call('ZREM', KEYS[4], tenant .. '/' .. thr)
if redis.call('ZCARD', KEYS[3]) == 0 then redis.call('SREM', KEYS[5], tenant) end
return 1
`)

// deleteScript removes every key of the thread and returns {its run ids,
// its subjects}.
var deleteScript = redis.NewScript(luaBase + luaDropBlobs + `
local runs = redis.call('ZRANGE', p .. 'runs', 0, -1)
for _, r in ipairs(runs) do
  redis.call('DEL', p .. 'run:' .. r, p .. 'ev:' .. r, p .. 'run:' .. r .. ':resp', p .. 'run:' .. r .. ':up')
end
dropblobs(0)
local subs = redis.call('SMEMBERS', p .. 'subj')
redis.call('DEL', meta, p .. 'msgs', p .. 'hashes', p .. 'runs', p .. 'intr', p .. 'sys', p .. 'subj')
return {runs, subs}
`)
