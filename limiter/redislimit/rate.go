package redislimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/chronicle-proxy/chronicle/limiter"
)

// rateLua is GCRA over microseconds, mirroring limiter's gcra. KEYS: 1 the
// key's hash (fields rq, tk: theoretical arrival times), 2 the operation
// marker.
const rateLua = `
local W = 60000000
local function now_us()
  if ARGV[1] ~= '' then return tonumber(ARGV[1]) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function tat(field, now)
  local v = tonumber(redis.call('HGET', KEYS[1], field) or '0')
  if v < now then v = now end
  return v
end
local function quota(t, now, limit, per)
  local ahead = t - now
  if ahead < 0 then ahead = 0 end
  local rem = math.floor((W - ahead) / per)
  if rem < 0 then rem = 0 end
  return limit, rem, ahead
end
local function store(rq, tk, now)
  redis.call('HSET', KEYS[1], 'rq', string.format('%d', rq), 'tk', string.format('%d', tk))
  local ahead = math.max(rq, tk) - now
  redis.call('PEXPIRE', KEYS[1], math.floor(ahead / 1000) + 1000)
end
local function shift(t, now, n, limit)
  t = t + math.ceil(n * W / limit)
  if t < now then t = now end
  return t
end
`

// admitScript decides one request. ARGV: now µs ("" = Redis TIME), rpm,
// tpm, tokens, op TTL ms. Returns {ok, kind (1 requests, 2 tokens),
// retry µs, rq limit, rq remaining, rq reset µs, tk limit, tk remaining,
// tk reset µs}. A retry of an admitted op returns the stored answer and
// charges nothing twice.
var admitScript = redis.NewScript(rateLua + `
local prev = redis.call('GET', KEYS[2])
if prev then
  local out = {}
  for v in string.gmatch(prev, '[^,]+') do table.insert(out, tonumber(v)) end
  return out
end
local now = now_us()
local rpm, tpm, cost = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local rq, tk = tat('rq', now), tat('tk', now)
local nrq, ntk = rq, tk
local ok, kind, retry = 1, 0, 0
local r1, r2, r3, t1, t2, t3 = 0, 0, 0, 0, 0, 0
if rpm > 0 then
  local per = W / rpm
  nrq = rq + math.ceil(per)
  if nrq - now > W then
    ok, kind, retry = 0, 1, nrq - W - now
    nrq = rq
  end
  r1, r2, r3 = quota(nrq, now, rpm, per)
end
if tpm > 0 then
  if cost > tpm then cost = tpm end
  local per = W / tpm
  ntk = tk + math.ceil(cost * per)
  if ntk - now > W then
    local r = ntk - W - now
    if ok == 1 or r > retry then kind, retry = 2, r end
    ok = 0
    ntk = tk
  end
  t1, t2, t3 = quota(ntk, now, tpm, per)
end
local out = {ok, kind, retry, r1, r2, r3, t1, t2, t3}
if ok == 1 then
  store(nrq, ntk, now)
  local s = {}
  for i, v in ipairs(out) do s[i] = string.format('%d', v) end
  redis.call('SET', KEYS[2], table.concat(s, ','), 'PX', ARGV[5])
end
return out
`)

// adjustScript settles or refunds a reservation once. ARGV: now µs, rpm,
// tpm, token delta, refund request (0/1), op TTL ms. Returns 1 if applied,
// 0 if this op already ran.
var adjustScript = redis.NewScript(rateLua + `
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[6]) then return 0 end
local now = now_us()
local rpm, tpm, delta = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local rq, tk = tat('rq', now), tat('tk', now)
if tpm > 0 and delta ~= 0 then tk = shift(tk, now, delta, tpm) end
if rpm > 0 and ARGV[5] == '1' then rq = shift(rq, now, -1, rpm) end
store(rq, tk, now)
return 1
`)

// opTTL outlives any go-redis retry of the same call.
const opTTL = 2 * time.Minute

func (l *Limiter) nowArg() string {
	if l.o.Now == nil {
		return ""
	}
	return fmt.Sprint(l.o.Now().UnixMicro())
}

// Admit implements limiter.RateLimiter with one atomic script per call.
func (l *Limiter) Admit(ctx context.Context, key string, lim limiter.Limits, tokens int64) (limiter.Reservation, error) {
	if tokens < 0 {
		tokens = 0
	}
	tag := l.tag("r", key)
	op := newToken()
	v, err := admitScript.Run(ctx, l.rdb, []string{tag, tag + ":op:" + op},
		l.nowArg(), lim.RPM, lim.TPM, tokens, opTTL.Milliseconds()).Int64Slice()
	if err != nil {
		return nil, fmt.Errorf("redislimit: admit %q: %w", key, err)
	}
	us := func(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
	rq := limiter.Quota{Limit: v[3], Remaining: v[4], Reset: us(v[5])}
	tq := limiter.Quota{Limit: v[6], Remaining: v[7], Reset: us(v[8])}
	if v[0] != 1 {
		kind := "requests"
		if v[1] == 2 {
			kind = "tokens"
		}
		return nil, &limiter.RateLimitError{Kind: kind, RetryAfter: us(v[2]), Requests: rq, Tokens: tq}
	}
	charged := tokens
	if lim.TPM > 0 && charged > lim.TPM {
		charged = lim.TPM
	}
	return &reservation{l: l, tag: tag, op: op, lim: lim, reserved: charged, rq: rq, tq: tq}, nil
}

type reservation struct {
	l        *Limiter
	tag, op  string
	lim      limiter.Limits
	reserved int64
	rq, tq   limiter.Quota
	done     atomic.Bool
}

func (r *reservation) Quota() (requests, tokens limiter.Quota) { return r.rq, r.tq }

func (r *reservation) adjust(ctx context.Context, delta int64, refundReq bool) error {
	if !r.done.CompareAndSwap(false, true) {
		return nil
	}
	flag := "0"
	if refundReq {
		flag = "1"
	}
	err := adjustScript.Run(ctx, r.l.rdb, []string{r.tag, r.tag + ":op:" + r.op + ":adj"},
		r.l.nowArg(), r.lim.RPM, r.lim.TPM, delta, flag, opTTL.Milliseconds()).Err()
	if err != nil {
		r.done.Store(false) // let the caller try again
		return fmt.Errorf("redislimit: settle: %w", err)
	}
	return nil
}

// Settle implements limiter.Reservation.
func (r *reservation) Settle(ctx context.Context, actual int64) error {
	if actual < 0 {
		actual = 0
	}
	return r.adjust(ctx, actual-r.reserved, false)
}

// Refund implements limiter.Reservation.
func (r *reservation) Refund(ctx context.Context) error { return r.adjust(ctx, -r.reserved, true) }

var _ limiter.RateLimiter = (*Limiter)(nil)
var _ limiter.Gates = (*Limiter)(nil)
