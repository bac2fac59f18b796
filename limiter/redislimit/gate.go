package redislimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/limiter"
)

// gateLua holds the helpers every gate script shares. KEYS: 1 ticket
// counter, 2 waiting (zset by ticket), 3 waiting leases (zset by expiry),
// 4 held (zset by lease expiry).
const gateLua = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function purge(now)
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 1000)
  if #gone > 0 then
    redis.call('ZREM', KEYS[2], unpack(gone))
    redis.call('ZREM', KEYS[3], unpack(gone))
  end
end
-- promote hands free slots to the oldest tickets and wakes their replicas.
local function promote(now, cap, lease, channel)
  local toks
  if cap <= 0 then
    toks = redis.call('ZRANGE', KEYS[2], 0, -1)
  else
    local free = cap - redis.call('ZCARD', KEYS[4])
    if free <= 0 then return end
    toks = redis.call('ZRANGE', KEYS[2], 0, free - 1)
  end
  if #toks == 0 then return end
  redis.call('ZREM', KEYS[2], unpack(toks))
  redis.call('ZREM', KEYS[3], unpack(toks))
  for _, tok in ipairs(toks) do
    redis.call('ZADD', KEYS[4], now + lease, tok)
  end
  redis.call('PUBLISH', channel, table.concat(toks, ' '))
end
`

// acquireScript queues the token (mode 1) or checks on it (mode 0) and
// admits whoever is first. ARGV: token, cap, lease ms, max waiting, mode,
// channel. Returns 1 held, 0 waiting, -1 not queued (its place lapsed;
// check mode only), -2 queue full. Running it twice is harmless: a token
// already held or queued is only looked up.
var acquireScript = redis.NewScript(gateLua + `
local tok, cap, lease, maxw = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
purge(now)
if redis.call('ZSCORE', KEYS[4], tok) then return 1 end
if redis.call('ZSCORE', KEYS[2], tok) then
  redis.call('ZADD', KEYS[3], now + lease, tok)
else
  if ARGV[5] ~= '1' then return -1 end
  local waiting = redis.call('ZCARD', KEYS[2])
  if cap <= 0 or (waiting == 0 and redis.call('ZCARD', KEYS[4]) < cap) then
    redis.call('ZADD', KEYS[4], now + lease, tok)
    return 1
  end
  if maxw < 0 or (maxw > 0 and waiting >= maxw) then return -2 end
  local ticket = redis.call('INCR', KEYS[1])
  redis.call('ZADD', KEYS[2], ticket, tok)
  redis.call('ZADD', KEYS[3], now + lease, tok)
end
promote(now, cap, lease, ARGV[6])
if redis.call('ZSCORE', KEYS[4], tok) then return 1 end
return 0
`)

// releaseScript frees the token's slot or place and admits the next
// tickets. ARGV: token, cap, lease ms, channel. Idempotent.
var releaseScript = redis.NewScript(gateLua + `
local tok, cap, lease = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREM', KEYS[4], tok)
redis.call('ZREM', KEYS[2], tok)
redis.call('ZREM', KEYS[3], tok)
local now = now_ms()
purge(now)
promote(now, cap, lease, ARGV[4])
return 1
`)

// withdrawScript takes a waiter out of the queue unless it was admitted
// meanwhile (then it keeps the slot). ARGV: token. Returns 1 if held.
var withdrawScript = redis.NewScript(`
local tok = ARGV[1]
if redis.call('ZSCORE', KEYS[4], tok) then return 1 end
redis.call('ZREM', KEYS[2], tok)
redis.call('ZREM', KEYS[3], tok)
return 0
`)

// renewScript extends the leases of a replica's tokens on one gate and
// returns those it no longer finds. ARGV: lease ms, tokens...
var renewScript = redis.NewScript(gateLua + `
local now = now_ms()
local lease = tonumber(ARGV[1])
local missing = {}
for i = 2, #ARGV do
  local tok = ARGV[i]
  if redis.call('ZSCORE', KEYS[4], tok) then
    redis.call('ZADD', KEYS[4], 'XX', now + lease, tok)
  elseif redis.call('ZSCORE', KEYS[2], tok) then
    redis.call('ZADD', KEYS[3], 'XX', now + lease, tok)
  else
    table.insert(missing, tok)
  end
end
return missing
`)

// countScript reports the shared gate's holders and waiters (expired ones
// excluded).
var countScript = redis.NewScript(gateLua + `
local now = now_ms()
return {redis.call('ZCOUNT', KEYS[4], '(' .. now, '+inf'), redis.call('ZCOUNT', KEYS[3], '(' .. now, '+inf')}
`)

// SharedGate is one replica's handle on a gate shared through Redis; Limiter.Gate
// returns it as a limiter.Gate. Safe for concurrent use.
type SharedGate struct {
	l    *Limiter
	name string
	keys []string

	mu  sync.Mutex
	cfg limiter.GateConfig
	c   limiter.GateCounters
}

// Gate returns this replica's handle on the shared gate called name. Every
// replica must pass the same cfg; a different cfg updates this replica's
// view (the cap a script enforces is the caller's).
func (l *Limiter) Gate(name string, cfg limiter.GateConfig) limiter.Gate {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.gates[name]
	if g == nil {
		tag := l.tag("g", name)
		g = &SharedGate{l: l, name: name, keys: []string{tag + ":seq", tag + ":wait", tag + ":wl", tag + ":held"}}
		l.gates[name] = g
	}
	g.mu.Lock()
	g.cfg = cfg
	g.mu.Unlock()
	return g
}

func (g *SharedGate) config() limiter.GateConfig {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cfg
}

// Stats implements limiter.Gate: this replica's holders and waiters.
func (g *SharedGate) Stats() limiter.GateStats { return g.c.Snapshot(g.config().MaxConcurrent) }

// Counts asks Redis how many slots are held and how many wait across all
// replicas.
func (g *SharedGate) Counts(ctx context.Context) (held, waiting int64, err error) {
	v, err := countScript.Run(ctx, g.l.rdb, g.keys).Int64Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("redislimit: gate %q counts: %w", g.name, err)
	}
	return v[0], v[1], nil
}

func (g *SharedGate) acquireCmd(ctx context.Context, tok string, cfg limiter.GateConfig, enqueue bool) (int64, error) {
	mode := "0"
	if enqueue {
		mode = "1"
	}
	return acquireScript.Run(ctx, g.l.rdb, g.keys, tok, cfg.MaxConcurrent, g.l.o.Lease.Milliseconds(), cfg.MaxWaiting, mode, g.l.channel).Int64()
}

// background is for clean-up that must run even when the caller's context
// ended.
func background() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 2*time.Second)
}

func (g *SharedGate) releaseToken(tok string) {
	g.l.mu.Lock()
	delete(g.l.tokens, tok)
	g.l.mu.Unlock()
	ctx, cancel := background()
	defer cancel()
	cfg := g.config()
	if err := releaseScript.Run(ctx, g.l.rdb, g.keys, tok, cfg.MaxConcurrent, g.l.o.Lease.Milliseconds(), g.l.channel).Err(); err != nil {
		g.l.o.Logger.Warn("redislimit: release slot (it lapses with its lease)", "gate", g.name, "err", err)
	}
}

// Acquire implements limiter.Gate.
func (g *SharedGate) Acquire(ctx context.Context) (limiter.Slot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cfg := g.config()
	tok := newToken()
	e := &entry{g: g, notify: make(chan struct{}, 1)}
	g.l.mu.Lock()
	if g.l.closed {
		g.l.mu.Unlock()
		return nil, limiter.ErrClosed
	}
	g.l.tokens[tok] = e // before queuing, so no wake-up is missed
	g.l.mu.Unlock()

	res, err := g.acquireCmd(ctx, tok, cfg, true)
	if err != nil {
		g.l.later(func() { g.releaseToken(tok) }) // the script may have run
		if ctx.Err() != nil {
			g.c.Cancelled.Add(1)
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("redislimit: gate %q acquire: %w", g.name, err)
	}
	switch res {
	case 1:
		g.c.Acquired.Add(1)
		return g.held(tok, e), nil
	case -2:
		g.l.mu.Lock()
		delete(g.l.tokens, tok)
		g.l.mu.Unlock()
		g.c.QueueFull.Add(1)
		return nil, limiter.ErrQueueFull
	}

	g.c.Waiting.Add(1)
	defer g.c.Waiting.Add(-1)
	start := time.Now()
	var timeout <-chan time.Time
	if cfg.Timeout > 0 {
		t := time.NewTimer(cfg.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	recheck := time.NewTicker(g.l.o.Recheck)
	defer recheck.Stop()
	admitted := func() limiter.Slot {
		g.c.Acquired.Add(1)
		g.c.Queued.Add(1)
		g.c.WaitNanos.Add(int64(time.Since(start)))
		return g.held(tok, e)
	}
	for {
		select {
		case <-e.notify:
		case <-recheck.C:
		case <-ctx.Done():
			g.releaseToken(tok) // gives the place up, or passes on a slot granted just now
			g.c.Cancelled.Add(1)
			return nil, ctx.Err()
		case <-timeout:
			bctx, cancel := background()
			kept, err := withdrawScript.Run(bctx, g.l.rdb, g.keys, tok).Int64()
			cancel()
			if err == nil && kept == 1 {
				return admitted(), nil
			}
			g.releaseToken(tok)
			g.c.QueueTimeout.Add(1)
			return nil, limiter.ErrQueueTimeout
		}
		if g.l.isClosed() {
			g.releaseToken(tok)
			return nil, limiter.ErrClosed
		}
		res, err := g.acquireCmd(ctx, tok, cfg, false)
		if err != nil {
			if ctx.Err() != nil {
				continue // the ctx.Done case cleans up
			}
			g.l.later(func() { g.releaseToken(tok) })
			return nil, fmt.Errorf("redislimit: gate %q wait: %w", g.name, err)
		}
		switch res {
		case 1:
			return admitted(), nil
		case -1:
			// Our place lapsed (Redis was unreachable for a lease): queue
			// again, at the back.
			res, err = g.acquireCmd(ctx, tok, cfg, true)
			if err == nil && res == 1 {
				return admitted(), nil
			}
			if err == nil && res == -2 {
				g.releaseToken(tok)
				g.c.QueueFull.Add(1)
				return nil, limiter.ErrQueueFull
			}
		}
	}
}

func (g *SharedGate) held(tok string, e *entry) limiter.Slot {
	s := &slot{g: g, tok: tok}
	g.l.mu.Lock()
	e.held = true
	e.slot = s
	g.l.mu.Unlock()
	g.c.InUse.Add(1)
	return s
}

type slot struct {
	g    *SharedGate
	tok  string
	done atomic.Bool
}

// Release implements limiter.Slot.
func (s *slot) Release() {
	if s.done.CompareAndSwap(false, true) {
		s.g.c.InUse.Add(-1)
		s.g.releaseToken(s.tok)
	}
}
