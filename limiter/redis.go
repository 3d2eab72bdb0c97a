package limiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults for the zero fields of RedisConfig.
const (
	DefaultPrefix         = "limiter:"
	DefaultTimeout        = 50 * time.Millisecond
	DefaultFailRetryAfter = time.Second
	DefaultRecheck        = 250 * time.Millisecond
)

// RedisConfig holds the optional settings of a Redis limiter. The zero value
// means the documented defaults: keys under "limiter:", a 50ms budget per
// decision, fail open, no logging, the over-limit cache on.
type RedisConfig struct {
	// Prefix starts every Redis key the limiter writes; the full key is
	// Prefix + algorithm + ":" + key. Default DefaultPrefix.
	Prefix string
	// Timeout bounds one decision, retries included. Default DefaultTimeout.
	Timeout time.Duration
	// FailClosed rejects events while Redis cannot decide; the default is to
	// admit them (fail open). Either way Allow also returns an error
	// wrapping ErrUnavailable.
	FailClosed bool
	// FailRetryAfter is the RetryAfter of events rejected because Redis
	// failed (with FailClosed). Default DefaultFailRetryAfter.
	FailRetryAfter time.Duration
	// Logger receives a warning when Redis starts failing and a notice
	// when it answers again; nil means no logging.
	Logger *slog.Logger
	// Fallback, when set, decides while Redis fails, in place of the
	// fail-open or fail-closed answer: typically a Memory limiter with this
	// process's share of the limit, so that a fleet keeps roughly its global
	// rate without Redis. Allow still returns an error wrapping
	// ErrUnavailable with the Fallback's Result. Default none.
	Fallback Limiter
	// NoCache turns off the local cache of keys known to be over their
	// limit, so every decision goes to Redis.
	NoCache bool
	// Recheck is how often, while Redis fails, one decision asks it
	// again; the others meanwhile answer at once as if it had failed
	// (counted in Failures), instead of each waiting out the Timeout.
	// Default DefaultRecheck.
	Recheck time.Duration
}

// Redis is a Limiter whose state lives in Redis, shared by every process
// that uses the same Redis, prefix, algorithm and limit. Each decision is
// one Lua script (EVALSHA, falling back to EVAL when Redis lost it) that
// reads the clock with Redis TIME and changes the key atomically, so
// concurrent callers can never admit more than the limit. Keys expire by
// themselves once they hold nothing worth keeping.
//
// A key found over its limit is remembered locally until it may be admitted
// again, and rejected without asking Redis meanwhile. When Redis does not
// answer within the timeout the limiter fails open or closed as configured
// and counts the failure; while it fails, one decision per Recheck asks it
// again and the others answer at once, and it uses Redis again as soon as
// Redis answers.
//
// A Redis is safe for concurrent use. Create it with NewRedis.
type Redis struct {
	rdb    redis.UniversalClient
	alg    Algorithm
	limit  Limit
	cfg    RedisConfig
	script *redis.Script
	args   []any
	quota  int64
	// ctxAware is set when the client honours context deadlines itself.
	ctxAware bool

	blocked  blockCache
	failures atomic.Uint64
	down     atomic.Bool
	recheck  atomic.Int64 // while down: when (Unix ns) the next decision asks Redis again
}

// errNotAsked is the cause of a decision made while Redis was failing,
// between two rechecks.
var errNotAsked = errors.New("redis failed moments ago: not asked until its next recheck")

// NewRedis returns a limiter applying l with alg, its state kept in rdb.
// Its Period must be at least a microsecond, the resolution of Redis TIME.
//
// Give rdb ContextTimeoutEnabled: without it go-redis ignores context
// deadlines and waits out its own socket timeouts, so Allow has to watch
// each decision from a goroutine of its own to keep within cfg.Timeout,
// and those goroutines linger while Redis hangs.
func NewRedis(rdb redis.UniversalClient, alg Algorithm, l Limit, cfg RedisConfig) (*Redis, error) {
	if err := l.Validate(); err != nil {
		return nil, fmt.Errorf("new redis limiter: %w", err)
	}
	if l.Period < time.Microsecond {
		return nil, fmt.Errorf("new redis limiter: period %v: %w: below a microsecond", l.Period, ErrInvalidLimit)
	}
	script, ok := scripts[alg]
	if !ok {
		return nil, fmt.Errorf("new redis limiter: %q: %w", alg, ErrUnknownAlgorithm)
	}
	if rdb == nil {
		return nil, errors.New("new redis limiter: nil client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.FailRetryAfter <= 0 {
		cfg.FailRetryAfter = DefaultFailRetryAfter
	}
	if cfg.Recheck <= 0 {
		cfg.Recheck = DefaultRecheck
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Logger = cfg.Logger.With("algorithm", string(alg), "limit", l.String())
	return &Redis{
		rdb:    rdb,
		alg:    alg,
		limit:  l,
		cfg:    cfg,
		script: script,
		args:   []any{l.Period.Microseconds(), l.Count, l.capacity()},
		quota:  l.quota(alg),

		ctxAware: honoursContext(rdb),
	}, nil
}

// Algorithm returns the algorithm r applies.
func (r *Redis) Algorithm() Algorithm { return r.alg }

// Limit returns the limit r applies.
func (r *Redis) Limit() Limit { return r.limit }

// Failures returns how many decisions Redis failed to make in time since r
// was created.
func (r *Redis) Failures() uint64 { return r.failures.Load() }

// Allow decides for one event of key. When Redis fails or times out it
// returns the Fallback's, or else the fail-open or fail-closed, Result
// together with an error wrapping ErrUnavailable. When ctx ends first it returns a rejecting
// Result and ctx's error, which is not counted as a Redis failure.
func (r *Redis) Allow(ctx context.Context, key string) (Result, error) {
	now := time.Now()
	if !r.cfg.NoCache {
		if res, ok := r.blocked.get(key, now); ok {
			return res, nil
		}
	}
	if r.down.Load() && !r.asks(now) {
		return r.fail(ctx, key, errNotAsked)
	}
	vals, err := r.run(ctx, key)
	if err == nil && len(vals) != 4 {
		err = fmt.Errorf("script returned %d values, want 4", len(vals))
	}
	if err != nil {
		if ctx.Err() != nil {
			return Result{Limit: r.quota, RetryAfter: r.cfg.FailRetryAfter}, fmt.Errorf("limiter: allow %q: %w", key, ctx.Err())
		}
		return r.fail(ctx, key, err)
	}
	if r.down.CompareAndSwap(true, false) {
		r.cfg.Logger.Info("limiter: redis answers again", "failures", r.failures.Load())
	}
	res := Result{
		Allowed:    vals[0] == 1,
		Limit:      r.quota,
		Remaining:  vals[1],
		RetryAfter: time.Duration(vals[2]) * time.Microsecond,
		Reset:      time.Duration(vals[3]) * time.Microsecond,
	}
	if !res.Allowed && !r.cfg.NoCache && res.RetryAfter > 0 {
		r.blocked.put(key, now, res)
	}
	return res, nil
}

// run runs the script for key within the timeout. A client that does not
// honour context deadlines (go-redis without ContextTimeoutEnabled) would
// wait for its own socket timeouts, seconds by default, so for those the
// decision is watched from here and abandoned at the deadline.
func (r *Redis) run(ctx context.Context, key string) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	keys := []string{r.cfg.Prefix + string(r.alg) + ":" + key}
	if r.ctxAware {
		return r.script.Run(ctx, r.rdb, keys, r.args...).Int64Slice()
	}
	type reply struct {
		vals []int64
		err  error
	}
	done := make(chan reply, 1)
	go func() {
		vals, err := r.script.Run(ctx, r.rdb, keys, r.args...).Int64Slice()
		done <- reply{vals, err}
	}()
	select {
	case rep := <-done:
		return rep.vals, rep.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// honoursContext reports whether rdb bounds its I/O by context deadlines.
func honoursContext(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// asks reports whether a decision made at now, while Redis fails, is the
// one that asks it again: the first after each Recheck.
func (r *Redis) asks(now time.Time) bool {
	next := r.recheck.Load()
	return now.UnixNano() >= next && r.recheck.CompareAndSwap(next, now.Add(r.cfg.Recheck).UnixNano())
}

// fail counts and logs a failed decision and returns the configured answer.
func (r *Redis) fail(ctx context.Context, key string, cause error) (Result, error) {
	n := r.failures.Add(1)
	if !r.down.Load() {
		r.recheck.Store(time.Now().Add(r.cfg.Recheck).UnixNano())
	}
	if r.down.CompareAndSwap(false, true) {
		r.cfg.Logger.Warn("limiter: redis unavailable", "err", cause, "fail_closed", r.cfg.FailClosed, "fallback", r.cfg.Fallback != nil, "failures", n)
	}
	err := fmt.Errorf("limiter: allow %q: %w: %w", key, ErrUnavailable, cause)
	if r.cfg.Fallback != nil {
		if res, ferr := r.cfg.Fallback.Allow(ctx, key); ferr == nil {
			return res, err
		}
	}
	if r.cfg.FailClosed {
		return Result{Limit: r.quota, RetryAfter: r.cfg.FailRetryAfter, Reset: r.cfg.FailRetryAfter}, err
	}
	return Result{Allowed: true, Limit: r.quota}, err
}

// blockShards is the number of independently locked parts of a blockCache.
const blockShards = 16

// blockCache remembers keys that are over their limit until they may be
// admitted again. It is safe for concurrent use; its zero value is empty.
type blockCache struct {
	shards [blockShards]blockShard
}

type blockShard struct {
	mu        sync.Mutex
	m         map[string]blocked
	nextSweep time.Time
}

type blocked struct {
	until time.Time // when an event may be admitted again
	reset time.Time // when the key is back to its full quota
	res   Result
}

// get returns the rejecting Result for key at now if key is blocked.
func (c *blockCache) get(key string, now time.Time) (Result, bool) {
	sh := &c.shards[fnv32(key)%blockShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, ok := sh.m[key]
	if !ok {
		return Result{}, false
	}
	if !now.Before(b.until) {
		delete(sh.m, key)
		return Result{}, false
	}
	res := b.res
	res.RetryAfter = b.until.Sub(now)
	res.Reset = max(b.reset.Sub(now), res.RetryAfter)
	return res, true
}

// put blocks key from now until res.RetryAfter has passed.
func (c *blockCache) put(key string, now time.Time, res Result) {
	sh := &c.shards[fnv32(key)%blockShards]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.m == nil {
		sh.m = make(map[string]blocked)
	}
	if now.After(sh.nextSweep) {
		for k, b := range sh.m {
			if !now.Before(b.until) {
				delete(sh.m, k)
			}
		}
		sh.nextSweep = now.Add(time.Second)
	}
	sh.m[key] = blocked{until: now.Add(res.RetryAfter), reset: now.Add(res.Reset), res: res}
}
