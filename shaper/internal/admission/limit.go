package admission

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"time"

	"github.com/shaper-dev/shaper/limiter"
	"github.com/shaper-dev/shaper/policies"
)

// admitLimiter is a policy's admission limiter, swapped whole when the
// admit block is tuned.
type admitLimiter struct {
	l     limiter.Limiter
	admit policies.Admit
}

// sameAdmit reports whether two admit blocks make the same limiter.
func sameAdmit(a, b *policies.Admit) bool { return reflect.DeepEqual(a, b) }

// newAdmitLimiter builds the limiter of p's admit block: in Redis when
// cfg.Redis is set (shared by every shaper), in memory otherwise; nil for a
// policy without one. While Redis fails, a policy that fails open falls
// back to this shaper's local share of the limit (localShare); one that
// fails closed is Unavailable.
func newAdmitLimiter(p policies.Policy, cfg Config) (*admitLimiter, error) {
	a := p.Admit
	if a == nil {
		return nil, nil
	}
	alg, err := limiter.ParseAlgorithm(a.Algorithm)
	if err != nil {
		return nil, err
	}
	lim := limitOf(a)
	var l limiter.Limiter
	if cfg.Redis == nil {
		l, err = limiter.NewMemory(alg, lim)
	} else {
		rc := limiter.RedisConfig{
			Prefix:     "shaper:admit:" + p.Name + ":",
			FailClosed: a.Fail == policies.FailClosed,
			Logger:     cfg.Logger.With("policy", p.Name),
		}
		if !rc.FailClosed {
			rc.Fallback = &localShare{alg: alg, limit: lim, shapers: cfg.Shapers}
		}
		l, err = limiter.NewRedis(cfg.Redis, alg, lim, rc)
	}
	if err != nil {
		return nil, err
	}
	return &admitLimiter{l: l, admit: *a}, nil
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

// admitLimit applies the admission limiter l of policy p to a job of key
// at now. It returns the decision to answer with when the job must not go
// on.
func (g *Gate) admitLimit(ctx context.Context, l *admitLimiter, p *policies.Policy, key string, now time.Time) (Decision, bool) {
	a := &l.admit
	var res limiter.Result
	var err error
	if m, ok := l.l.(*limiter.Memory); ok {
		res = m.AllowAt(key, now) // the gate's time: a replay's is virtual
	} else {
		res, err = l.l.Allow(ctx, key)
	}
	if err != nil {
		g.counts.limiterErrors.Add(1)
		if !errors.Is(err, limiter.ErrUnavailable) {
			g.log.Warn("admission limiter", "err", err)
		} else {
			g.counts.limiterDown.CompareAndSwap(0, now.UnixNano())
		}
	} else {
		g.counts.limiterDown.Store(0)
	}
	if res.Allowed {
		return Decision{}, true
	}
	if err != nil && errors.Is(err, limiter.ErrUnavailable) && a.Fail == policies.FailClosed {
		d := unavailable("admission limiter", errors.New("the limiter's backend failed and the policy fails closed"))
		d.Reason = "admission limiter unavailable (policy fails closed)"
		d.RetryAfter = max(res.RetryAfter, DefaultUnavailableWait)
		return d, false
	}
	if a.Shadow {
		g.counts.shadowLimited.Add(1)
		return Decision{}, true
	}
	g.counts.limited.Add(1)
	d := Decision{
		Outcome:    Limited,
		RetryAfter: max(res.RetryAfter, time.Millisecond),
		Limits:     res,
		Window:     quotaWindow(a, res.Limit),
		Reason:     fmt.Sprintf("admission limit %s (%s) of policy %q exceeded for this key", a.Limit, a.Algorithm, p.Name),
	}
	if err != nil {
		d.Reason += fmt.Sprintf(" (Redis is unavailable: this shaper enforces its local share, 1/%d of the limit)", g.cfg.Shapers())
	}
	return d, false
}

// quotaWindow is the window that RateLimit-Policy announces the quota of
// admission limit a over (q=quota;w=window): a window algorithm's period;
// for the buckets, whose quota is the burst, the time the limit's rate
// takes to refill it (30/m with burst 5: q=5;w=10), so that q per w reads
// as the limit's rate, not one quota/count times slower.
func quotaWindow(a *policies.Admit, quota int64) time.Duration {
	l := limitOf(a)
	switch limiter.Algorithm(a.Algorithm) {
	case limiter.GCRA, limiter.TokenBucket:
		return l.Period * time.Duration(quota) / time.Duration(l.Count)
	}
	return l.Period
}

// localShare is an in-memory limiter allowing this shaper's share of a
// limit while Redis is lost: Count (and Burst) divided by the number of live
// shapers, at least 1. It rebuilds itself when the number of shapers
// changes. Safe for concurrent use.
type localShare struct {
	alg     limiter.Algorithm
	limit   limiter.Limit
	shapers func() int64

	mu  sync.Mutex
	n   int64
	mem *limiter.Memory
}

var _ limiter.Limiter = (*localShare)(nil)

// Allow implements limiter.Limiter.
func (l *localShare) Allow(ctx context.Context, key string) (limiter.Result, error) {
	n := max(l.shapers(), 1)
	l.mu.Lock()
	if l.mem == nil || n != l.n {
		share := l.limit
		share.Count = max(share.Count/n, 1)
		if share.Burst > 0 {
			share.Burst = max(share.Burst/n, 1)
		}
		m, err := limiter.NewMemory(l.alg, share)
		if err != nil {
			l.mu.Unlock()
			return limiter.Result{}, err
		}
		l.mem, l.n = m, n
	}
	m := l.mem
	l.mu.Unlock()
	return m.Allow(ctx, key)
}
