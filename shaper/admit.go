package shaper

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/policies"
)

// newAdmission builds the admission limiter of p's admit block: in Redis
// when rdb is set (shared by every shaper), in memory otherwise. It returns
// nil for a policy without one. While Redis fails, a policy that fails open
// falls back to this shaper's local share of the limit (see localShare); one
// that fails closed answers 503.
func newAdmission(p policies.Policy, rdb redis.UniversalClient, cfg Config, sharers *peers) (limiter.Limiter, error) {
	a := p.Admit
	if a == nil {
		return nil, nil
	}
	alg, err := limiter.ParseAlgorithm(a.Algorithm)
	if err != nil {
		return nil, err
	}
	lim := limitOf(a)
	if rdb == nil {
		return limiter.NewMemory(alg, lim)
	}
	rc := limiter.RedisConfig{
		Prefix:     "shaper:admit:" + p.Name + ":",
		FailClosed: a.Fail == "closed",
		Logger:     cfg.Logger.With("policy", p.Name),
	}
	if !rc.FailClosed {
		rc.Fallback = &localShare{alg: alg, limit: lim, peers: sharers}
	}
	return limiter.NewRedis(rdb, alg, lim, rc)
}

// admission is a policy's admission limiter, swapped whole when the admit
// block is tuned.
type admission struct{ l limiter.Limiter }

// setAdmission builds rt's admission limiter for p (none without an admit block).
func (s *Shaper) setAdmission(rt *runtime, p policies.Policy) error {
	l, err := newAdmission(p, s.rdb, s.cfg, &s.peers)
	if err != nil {
		return err
	}
	if l == nil {
		rt.admit.Store(nil)
	} else {
		rt.admit.Store(&admission{l})
	}
	return nil
}

// limitOf turns an admit block's rate into a limiter.Limit: N per period
// when N is whole, else one per interval (0.5/s is 1 per 2 s).
func limitOf(a *policies.Admit) limiter.Limit {
	l := limiter.Limit{Count: int64(a.Limit.N), Period: a.Limit.Per, Burst: int64(a.Burst)}
	if a.Limit.N != math.Trunc(a.Limit.N) || a.Limit.N < 1 {
		l.Count, l.Period = 1, a.Limit.Interval()
	}
	return l
}

// limited reports whether submissions to rt under p pass an admission
// limiter (one that may wait on Redis), as admitLimit decides.
func (rt *runtime) limited(p *policies.Policy) bool {
	return p.Admit != nil && rt.admit.Load() != nil
}

// admitLimit applies rt's admission limiter to sub. It returns the outcome
// to answer with when the submission must not reach the queue.
func (s *Shaper) admitLimit(ctx context.Context, rt *runtime, p *policies.Policy, key string) (outcome, bool) {
	a := rt.admit.Load()
	if a == nil || p.Admit == nil {
		return outcome{}, true
	}
	res, err := a.l.Allow(ctx, key)
	if err != nil {
		rt.counter.limiterErrors.Add(1)
		if !errors.Is(err, limiter.ErrUnavailable) {
			s.log.Warn("admission limiter", "policy", p.Name, "err", err)
		}
	}
	if res.Allowed {
		return outcome{}, true
	}
	if err != nil && errors.Is(err, limiter.ErrUnavailable) && p.Admit.Fail == "closed" {
		// Fail closed: the limiter cannot decide, the answer is 503.
		o := failed(http.StatusServiceUnavailable, "admission limiter unavailable (policy fails closed)")
		o.Policy, o.Key = p.Name, key
		o.RetryAfterMs = max(ceilMs(res.RetryAfter), DefaultUnavailableWait.Milliseconds())
		return o, false
	}
	if p.Admit.Shadow {
		rt.counter.shadowLimited.Add(1)
		return outcome{}, true
	}
	rt.counter.limited.Add(1)
	o := outcome{
		Status:       statusRejected,
		Code:         http.StatusTooManyRequests,
		Policy:       p.Name,
		Key:          key,
		RetryAfterMs: max(ceilMs(res.RetryAfter), 1),
		Error:        fmt.Sprintf("admission limit %s (%s) of policy %q exceeded for this key", p.Admit.Limit, p.Admit.Algorithm, p.Name),
		limits:       &res,
		window:       p.Admit.Limit.Per,
	}
	if err != nil {
		o.Error += fmt.Sprintf(" (Redis is unavailable: this shaper enforces its local share, 1/%d of the limit)", s.peers.count())
	}
	return o, false
}

// connectRedis opens the Redis client for admission limits, or returns nil
// when no Redis is configured. Redis being down at start is not fatal: each
// limiter fails open or closed as its policy says until Redis answers.
func connectRedis(ctx context.Context, url string) (redis.UniversalClient, error) {
	if url == "" {
		return nil, nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("shaper: --redis-url: %w", err)
	}
	opts.ContextTimeoutEnabled = true // let the limiter's per-decision timeout cut a hung Redis short
	opts.DialTimeout = 500 * time.Millisecond
	opts.ReadTimeout = 200 * time.Millisecond
	opts.WriteTimeout = 200 * time.Millisecond
	rdb := redis.NewClient(opts)
	return rdb, nil
}
