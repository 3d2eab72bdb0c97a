package limiter

import "github.com/redis/go-redis/v9"

// The Redis scripts mirror the pure algorithms in microseconds, the
// resolution of Redis TIME. Each runs as one atomic decision: nothing can
// interleave between reading a key's state, comparing it with the limit and
// writing it back. Each takes KEYS[1] = the key and ARGV = period in µs,
// count, capacity (the bucket size, for the buckets), and returns
// {allowed 0|1, remaining, retry_after µs, reset µs}. Times come from the
// server's clock, so clients whose clocks disagree share one timeline.
// Every written key carries an expiry after which it would mean "no state".

// scriptPrologue reads the arguments and the server clock. On Redis before
// 5 a script must switch to effects replication before a write that
// follows TIME; on Redis 7 replicate_commands is a no-op.
const scriptPrologue = `
if redis.replicate_commands then redis.replicate_commands() end
local key = KEYS[1]
local period = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local capacity = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function num(x) return string.format('%.17g', x) end
local function ms(us) return math.max(1, math.ceil(us / 1000)) end
local function window_start(at)
  local m = at % period
  if m < 0 then m = m + period elseif m >= period then m = m - period end
  return at - m
end
`

var scripts = map[Algorithm]*redis.Script{
	GCRA: redis.NewScript(scriptPrologue + `
local interval = math.max(1, math.floor(period / count))
local tau = interval * capacity
local tat = tonumber(redis.call('GET', key)) or now
if tat < now then tat = now end
local ahead = tat + interval - now
if ahead > tau then return {0, 0, ahead - tau, tat - now} end
redis.call('SET', key, num(tat + interval), 'PX', ms(ahead))
return {1, math.floor((tau - ahead) / interval), 0, ahead}
`),

	TokenBucket: redis.NewScript(scriptPrologue + `
local h = redis.call('HMGET', key, 't', 'ts')
local tokens, last = tonumber(h[1]), tonumber(h[2])
if tokens == nil or last == nil then
  tokens, last = capacity, now
elseif now > last then
  tokens = math.min(capacity, tokens + (now - last) * count / period)
  last = now
end
local reset
if tokens < 1 then
  reset = math.ceil((capacity - tokens) * period / count)
  return {0, 0, math.ceil((1 - tokens) * period / count), reset}
end
tokens = tokens - 1
reset = math.ceil((capacity - tokens) * period / count)
redis.call('HSET', key, 't', num(tokens), 'ts', num(last))
redis.call('PEXPIRE', key, ms(reset))
return {1, math.floor(tokens), 0, reset}
`),

	FixedWindow: redis.NewScript(scriptPrologue + `
local h = redis.call('HMGET', key, 'w', 'n')
local w = tonumber(h[1])
if w and now < w then now = w end -- the clock stepped back: stay in the counted window
local ws = window_start(now)
local n = 0
if w == ws then n = tonumber(h[2]) or 0 end
local reset = ws + period - now
if n >= count then return {0, 0, reset, reset} end
n = n + 1
redis.call('HSET', key, 'w', num(ws), 'n', n)
redis.call('PEXPIRE', key, ms(reset))
return {1, count - n, 0, reset}
`),

	SlidingLog: redis.NewScript(scriptPrologue + `
redis.call('ZREMRANGEBYSCORE', key, '-inf', num(now - period))
local n = redis.call('ZCARD', key)
if n < count then
  redis.call('ZADD', key, num(now), num(now) .. '-' .. n)
  redis.call('PEXPIRE', key, ms(period))
  return {1, count - n - 1, 0, period}
end
local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
return {0, 0, tonumber(oldest[2]) + period - now, tonumber(newest[2]) + period - now}
`),

	SlidingWindow: redis.NewScript(scriptPrologue + `
local h = redis.call('HMGET', key, 'w', 'p', 'c')
local w, prev, cur = tonumber(h[1]), tonumber(h[2]) or 0, tonumber(h[3]) or 0
if w and now < w then now = w end -- the clock stepped back: stay in the counted window
local ws = window_start(now)
if w == ws then
elseif w == ws - period then prev, cur = cur, 0
else prev, cur = 0, 0 end
local e = now - ws
if prev * (period - e) + cur * period < count * period then
  cur = cur + 1
  redis.call('HSET', key, 'w', num(ws), 'p', prev, 'c', cur)
  redis.call('PEXPIRE', key, ms(2 * period - e))
  local rem = count - cur - math.floor(prev * (period - e) / period)
  if rem < 0 then rem = 0 end
  return {1, rem, 0, 2 * period - e}
end
local reset = period - e
if cur > 0 then reset = 2 * period - e end
if cur < count and prev > 0 then
  local at = math.floor(period * (prev - count + cur) / prev) + 1
  if at < period then return {0, 0, at - e, reset} end
end
local retry = period - e
if cur >= count then retry = retry + math.floor(period * (cur - count) / cur) + 1 end
return {0, 0, retry, reset}
`),
}
