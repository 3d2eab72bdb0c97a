package limiter_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/limiter"
)

// Stopping Redis gives the configured answer within the timeout, with an
// error wrapping ErrUnavailable; starting it again brings the same limiter
// back to Redis, without a restart.
func TestRedisOutage(t *testing.T) {
	for _, failClosed := range []bool{false, true} {
		name := "fail-open"
		if failClosed {
			name = "fail-closed"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			rdb := newClient(t, srv.Addr(), 4)
			var asked atomic.Int64
			rdb.AddHook(askedHook{&asked})
			var logs testenv.Buffer
			const timeout = 100 * time.Millisecond
			l := limiter.Limit{Count: 3, Period: time.Minute}
			r, err := limiter.NewRedis(rdb, limiter.SlidingWindow, l, limiter.RedisConfig{
				Timeout:    timeout,
				FailClosed: failClosed,
				Logger:     slog.New(slog.NewTextHandler(&logs, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if res, err := r.Allow(ctx, "before"); err != nil || !res.Allowed {
				t.Fatalf("Allow before the outage = %+v, %v, want admitted", res, err)
			}

			srv.Stop()
			const outageCalls = 5
			asked.Store(0)
			outage := time.Now()
			for i := range outageCalls {
				start := time.Now()
				res, err := r.Allow(ctx, "during")
				took := time.Since(start)
				if !errors.Is(err, limiter.ErrUnavailable) {
					t.Fatalf("Allow during the outage: error = %v, want ErrUnavailable", err)
				}
				if res.Allowed == failClosed {
					t.Errorf("Allow during the outage (FailClosed %v): Allowed = %v, want %v", failClosed, res.Allowed, !failClosed)
				}
				if failClosed && res.RetryAfter <= 0 {
					t.Errorf("fail-closed RetryAfter = %v, want > 0", res.RetryAfter)
				}
				if slack := 500 * time.Millisecond; took > timeout+slack {
					t.Errorf("Allow %d during the outage took %v, want at most the timeout %v (+%v slack)", i, took, timeout, slack)
				}
			}
			if got := r.Failures(); got != outageCalls {
				t.Errorf("Failures() = %d, want %d", got, outageCalls)
			}
			// A tour's submissions each took the 50 ms timeout while Redis
			// was down: once it failed, one decision per Recheck asks it.
			rechecks := int64(time.Since(outage)/limiter.DefaultRecheck) + 1
			if n := asked.Load(); n > rechecks || n >= outageCalls {
				t.Errorf("Redis asked %d times by %d decisions during the outage, want at most one per %v (%d)", n, outageCalls, limiter.DefaultRecheck, rechecks)
			}

			srv.Start() // empty, and without the scripts: EVALSHA falls back to EVAL
			deadline := time.Now().Add(10 * time.Second)
			for {
				_, err := r.Allow(ctx, "probe")
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("limiter still failing 10s after Redis came back: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			for i := range 4 {
				res, err := r.Allow(ctx, "after")
				if err != nil || res.Allowed != (i < 3) {
					t.Errorf("Allow %d after recovery = %+v, %v, want Allowed %v", i+1, res, err, i < 3)
				}
			}
			out := logs.String()
			for _, want := range []string{"redis unavailable", "redis answers again"} {
				if !strings.Contains(out, want) {
					t.Errorf("log lacks %q:\n%s", want, out)
				}
			}
			if n := strings.Count(out, "redis unavailable"); n != 1 {
				t.Errorf("logged %d outage warnings for one outage, want 1", n)
			}
		})
	}
}

// A Redis that accepts connections but never answers costs at most the
// timeout per decision.
func TestRedisHungTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // hold, never answer
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	for _, ctxTimeouts := range []bool{false, true} {
		rdb := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), PoolSize: 4, ContextTimeoutEnabled: ctxTimeouts})
		t.Cleanup(func() { rdb.Close() })
		testHung(t, rdb)
	}
}

func testHung(t *testing.T, rdb *redis.Client) {
	const timeout = 80 * time.Millisecond
	r, err := limiter.NewRedis(rdb, limiter.GCRA, limiter.Limit{Count: 1, Period: time.Second}, limiter.RedisConfig{Timeout: timeout, FailClosed: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		start := time.Now()
		res, err := r.Allow(context.Background(), "k")
		took := time.Since(start)
		if !errors.Is(err, limiter.ErrUnavailable) || res.Allowed {
			t.Errorf("Allow on a hung Redis = %+v, %v, want rejected with ErrUnavailable", res, err)
		}
		if slack := 500 * time.Millisecond; took > timeout+slack {
			t.Errorf("ContextTimeoutEnabled %v: Allow on a hung Redis took %v, want at most %v (+%v slack)", rdb.Options().ContextTimeoutEnabled, took, timeout, slack)
		}
	}
}

// A key found over its limit is rejected from the local cache, without
// Redis, until its RetryAfter; other keys still need Redis.
func TestRedisOverLimitCache(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := newClient(t, srv.Addr(), 4)
	l := limiter.Limit{Count: 2, Period: time.Minute}
	r, err := limiter.NewRedis(rdb, limiter.FixedWindow, l, limiter.RedisConfig{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var rej limiter.Result
	for range 3 {
		if rej, err = r.Allow(ctx, "hot"); err != nil {
			t.Fatal(err)
		}
	}
	if rej.Allowed {
		t.Fatalf("3rd event of 2/min admitted: %+v", rej)
	}
	srv.Stop()
	res, err := r.Allow(ctx, "hot")
	if err != nil || res.Allowed || res.RetryAfter <= 0 || res.RetryAfter > rej.RetryAfter {
		t.Errorf("Allow(hot) with Redis down = %+v, %v, want rejected from the cache with RetryAfter in (0, %v]", res, err, rej.RetryAfter)
	}
	if _, err := r.Allow(ctx, "cold"); !errors.Is(err, limiter.ErrUnavailable) {
		t.Errorf("Allow(cold) with Redis down: error = %v, want ErrUnavailable", err)
	}
	if got := r.Failures(); got != 1 {
		t.Errorf("Failures() = %d, want 1 (the cached key costs no round trip)", got)
	}
}

// Two limiters on two connections share one limit: the state is in Redis.
func TestRedisSharedBetweenClients(t *testing.T) {
	addr := testenv.Redis(t)
	l := limiter.Limit{Count: 3, Period: time.Minute}
	var rs []*limiter.Redis
	for range 2 {
		r, err := limiter.NewRedis(newClient(t, addr, 1), limiter.TokenBucket, l, limiter.RedisConfig{Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	admitted := 0
	for i := range 6 {
		res, err := rs[i%2].Allow(context.Background(), "k")
		if err != nil {
			t.Fatal(err)
		}
		if res.Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("two limiters sharing 3/min admitted %d of 6, want 3", admitted)
	}
}

// Every key the scripts write expires by itself, once it would mean nothing.
func TestRedisKeysExpire(t *testing.T) {
	rdb := newClient(t, testenv.Redis(t), 4)
	ctx := context.Background()
	const period = 300 * time.Millisecond
	for _, alg := range limiter.Algorithms {
		r, err := limiter.NewRedis(rdb, alg, limiter.Limit{Count: 2, Period: period}, limiter.RedisConfig{Prefix: "exp:", Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		key := "exp:" + string(alg) + ":k"
		ttl, err := rdb.PTTL(ctx, key).Result()
		if err != nil || ttl <= 0 || ttl > 2*period+time.Millisecond {
			t.Errorf("%s: PTTL(%s) = %v, %v, want in (0, %v]", alg, key, ttl, err, 2*period)
		}
	}
	time.Sleep(2*period + 100*time.Millisecond)
	keys, err := rdb.Keys(ctx, "exp:*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("keys left after 2 periods: %v, %v, want none", keys, err)
	}
}

func TestNewRedisRejectsBadInput(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	ok := limiter.Limit{Count: 1, Period: time.Second}
	if _, err := limiter.NewRedis(rdb, "leaky", ok, limiter.RedisConfig{}); !errors.Is(err, limiter.ErrUnknownAlgorithm) {
		t.Errorf("NewRedis(leaky) error = %v, want ErrUnknownAlgorithm", err)
	}
	if _, err := limiter.NewRedis(rdb, limiter.GCRA, limiter.Limit{Count: 1, Period: time.Nanosecond}, limiter.RedisConfig{}); !errors.Is(err, limiter.ErrInvalidLimit) {
		t.Errorf("NewRedis(1/1ns) error = %v, want ErrInvalidLimit", err)
	}
	if _, err := limiter.NewRedis(nil, limiter.GCRA, ok, limiter.RedisConfig{}); err == nil {
		t.Errorf("NewRedis(nil client) error = nil, want an error")
	}
}

// quietRedis drops go-redis's own log lines, which the outage tests would
// otherwise fill with expected dial errors.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quietRedis{}) }

// With a Fallback, an outage is decided by the local limiter.
func TestRedisFallback(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := newClient(t, srv.Addr(), 4)
	l := limiter.Limit{Count: 4, Period: time.Minute}
	local, err := limiter.NewMemory(limiter.GCRA, limiter.Limit{Count: 2, Period: time.Minute}) // this process's half
	if err != nil {
		t.Fatal(err)
	}
	r, err := limiter.NewRedis(rdb, limiter.GCRA, l, limiter.RedisConfig{Timeout: 200 * time.Millisecond, Fallback: local})
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for i, want := range []bool{true, true, false} {
		res, err := r.Allow(context.Background(), "k")
		if !errors.Is(err, limiter.ErrUnavailable) || res.Allowed != want {
			t.Errorf("Allow %d during the outage = %+v, %v, want Allowed %v with ErrUnavailable", i+1, res, err, want)
		}
	}
}

// askedHook counts the commands a client sends (or tries to).
type askedHook struct{ n *atomic.Int64 }

func (h askedHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h askedHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h askedHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
