package limiter_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/limiter"
)

// subject is one limiter implementation under the contract: how to ask it
// and how to let time pass.
type subject struct {
	allow func(t *testing.T, key string) limiter.Result
	// wait lets d pass: the memory subjects step their clock, the Redis
	// subjects sleep (Redis reads its own clock).
	wait func(d time.Duration)
	// exact reports whether time is exact (the injected clock), so edges
	// can be checked to the nanosecond.
	exact bool
}

// factory builds a subject for one algorithm and limit.
type factory func(t *testing.T, alg limiter.Algorithm, l limiter.Limit) subject

// base is a Monday, 2026-11-02 09:00:00 UTC: an instant aligned to every
// window the tests use.
var base = time.Date(2026, 11, 2, 9, 0, 0, 0, time.UTC)

func memoryFactory(t *testing.T, alg limiter.Algorithm, l limiter.Limit) subject {
	m, err := limiter.NewMemory(alg, l)
	if err != nil {
		t.Fatalf("NewMemory(%s, %v) = %v", alg, l, err)
	}
	var mu sync.Mutex
	now := base.Add(7 * time.Millisecond) // not on a window edge
	return subject{
		allow: func(t *testing.T, key string) limiter.Result {
			mu.Lock()
			at := now
			mu.Unlock()
			return m.AllowAt(key, at)
		},
		wait: func(d time.Duration) {
			mu.Lock()
			now = now.Add(d)
			mu.Unlock()
		},
		exact: true,
	}
}

// newClient returns a client of the Redis at addr with poolSize connections.
func newClient(t testing.TB, addr string, poolSize int) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: poolSize})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// redisFactory makes subjects on the Redis at addr, each with its own
// client of 4 connections.
func redisFactory(addr string, cfg limiter.RedisConfig) factory {
	return func(t *testing.T, alg limiter.Algorithm, l limiter.Limit) subject {
		rdb := newClient(t, addr, 4)
		cfg := cfg // subjects are made in parallel: each gets its own copy
		if cfg.Timeout == 0 {
			cfg.Timeout = 5 * time.Second // a loaded test machine, not a production budget
		}
		cfg.Prefix = fmt.Sprintf("test:%s:", t.Name())
		r, err := limiter.NewRedis(rdb, alg, l, cfg)
		if err != nil {
			t.Fatalf("NewRedis(%s, %v) = %v", alg, l, err)
		}
		return subject{
			allow: func(t *testing.T, key string) limiter.Result {
				res, err := r.Allow(context.Background(), key)
				if err != nil {
					t.Errorf("Allow(%q) error = %v", key, err) // may run off the test goroutine
				}
				return res
			},
			wait: time.Sleep,
		}
	}
}

// alignToWindow sleeps until 10ms into the next window of period on the
// Redis server's clock, so a short test sequence stays within one window.
func alignToWindow(t *testing.T, rdb *redis.Client, period time.Duration) {
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	into := time.Duration(now.UnixNano() % int64(period))
	time.Sleep(period - into + 10*time.Millisecond)
}

// redisPeriod is the window of the Redis timing checks. Real time passes
// between calls, and the buckets refill continuously: a burst of Count
// must fit in Period/Count (400ms) for the count to be exact, which holds
// on a loaded 2-core machine.
const redisPeriod = 1200 * time.Millisecond

func TestContract(t *testing.T) {
	addr := testenv.Redis(t)
	rdb := newClient(t, addr, 1) // for TIME
	impls := []struct {
		name string
		new  factory
		// period is the window of the timing checks: simulated for memory,
		// real but short for Redis.
		period time.Duration
		align  func(t *testing.T, period time.Duration)
	}{
		{"memory", memoryFactory, 2 * time.Second, func(*testing.T, time.Duration) {}},
		{"redis", redisFactory(addr, limiter.RedisConfig{}), redisPeriod, func(t *testing.T, p time.Duration) { alignToWindow(t, rdb, p) }},
		{"redis-nocache", redisFactory(addr, limiter.RedisConfig{NoCache: true}), redisPeriod, func(t *testing.T, p time.Duration) { alignToWindow(t, rdb, p) }},
	}
	// The subtests mostly sleep: run them all at once rather than
	// -parallel (GOMAXPROCS) at a time.
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, impl := range impls {
		for _, alg := range limiter.Algorithms {
			l := limiter.Limit{Count: 3, Period: impl.period}
			timed := map[string]func(*testing.T, subject, limiter.Limit){
				"limit": testLimitHolds,
				"edge":  testEdge,
				"idle":  testAfterIdle,
			}
			for name, check := range timed {
				wg.Go(func() {
					t.Run(impl.name+"/"+string(alg)+"/"+name, func(t *testing.T) {
						s := impl.new(t, alg, l)
						impl.align(t, l.Period)
						check(t, s, l)
					})
				})
			}
			wg.Go(func() {
				t.Run(impl.name+"/"+string(alg)+"/concurrent", func(t *testing.T) {
					// A long period: the 1,000 callers must all fall in one window.
					testConcurrent(t, impl.new(t, alg, limiter.Limit{Count: 100, Period: time.Hour}), 100)
				})
			})
		}
	}
}

// fill asks for n events of key and checks that the first l.Count are
// admitted with Remaining counting down and the rest rejected.
func fill(t *testing.T, s subject, key string, l limiter.Limit, n int) (last limiter.Result) {
	t.Helper()
	for i := range n {
		res := s.allow(t, key)
		wantAllowed := int64(i) < l.Count
		if res.Allowed != wantAllowed {
			t.Fatalf("event %d of %q: Allowed = %v, want %v (%+v)", i+1, key, res.Allowed, wantAllowed, res)
		}
		if res.Limit != l.Count {
			t.Errorf("event %d of %q: Limit = %d, want %d", i+1, key, res.Limit, l.Count)
		}
		if wantAllowed {
			if want := l.Count - int64(i) - 1; res.Remaining != want {
				t.Errorf("event %d of %q: Remaining = %d, want %d", i+1, key, res.Remaining, want)
			}
			if res.RetryAfter != 0 {
				t.Errorf("event %d of %q: admitted with RetryAfter = %v, want 0", i+1, key, res.RetryAfter)
			}
		} else {
			if res.Remaining != 0 {
				t.Errorf("event %d of %q: rejected with Remaining = %d, want 0", i+1, key, res.Remaining)
			}
			if res.RetryAfter <= 0 || res.RetryAfter > 2*l.Period {
				t.Errorf("event %d of %q: RetryAfter = %v, want in (0, %v]", i+1, key, res.RetryAfter, 2*l.Period)
			}
			if res.Reset < res.RetryAfter {
				t.Errorf("event %d of %q: Reset = %v, want >= RetryAfter %v", i+1, key, res.Reset, res.RetryAfter)
			}
		}
		last = res
	}
	return last
}

// testLimitHolds: exactly Count of a burst are admitted, and other keys are
// independent of a full one.
func testLimitHolds(t *testing.T, s subject, l limiter.Limit) {
	fill(t, s, "a", l, int(l.Count)+5)
	fill(t, s, "b", l, int(l.Count)+1)
	if res := s.allow(t, "a"); res.Allowed {
		t.Errorf("full key a admitted after key b: %+v", res)
	}
}

// testEdge: a rejected event's RetryAfter is when the key admits again; the
// instant before, it does not.
func testEdge(t *testing.T, s subject, l limiter.Limit) {
	rej := fill(t, s, "k", l, int(l.Count)+1)
	if s.exact {
		s.wait(rej.RetryAfter - 1)
		if res := s.allow(t, "k"); res.Allowed {
			t.Fatalf("admitted 1ns before RetryAfter %v: %+v", rej.RetryAfter, res)
		}
		s.wait(1)
	} else {
		if res := s.allow(t, "k"); res.Allowed || res.RetryAfter > rej.RetryAfter {
			t.Fatalf("right after a rejection: %+v, want rejected with RetryAfter <= %v", res, rej.RetryAfter)
		}
		s.wait(rej.RetryAfter + 20*time.Millisecond)
	}
	admitted := int64(0)
	for range l.Count + 2 {
		if s.allow(t, "k").Allowed {
			admitted++
		}
	}
	if admitted < 1 || admitted > l.Count {
		t.Errorf("admitted %d at RetryAfter, want 1..%d", admitted, l.Count)
	}
}

// testAfterIdle: a key that has been idle for two periods has its whole
// quota again, however it was used before.
func testAfterIdle(t *testing.T, s subject, l limiter.Limit) {
	fill(t, s, "k", l, int(l.Count)+2)
	s.wait(2*l.Period + 20*time.Millisecond)
	fill(t, s, "k", l, int(l.Count)+1)
}

// testConcurrent: 1,000 concurrent callers on one key get exactly count admissions.
func testConcurrent(t *testing.T, s subject, count int64) {
	const callers = 1000
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range callers {
		wg.Go(func() {
			<-start
			if s.allow(t, "hot").Allowed {
				admitted.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := admitted.Load(); got != count {
		t.Errorf("%d concurrent callers: %d admitted, want exactly %d", callers, got, count)
	}
}
