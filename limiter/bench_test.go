package limiter_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/limiter"
)

// benchLimit admits everything the benchmarks send, so every decision does
// the full work of an admission.
var benchLimit = limiter.Limit{Count: 1 << 40, Period: time.Hour}

// benchKeys are the keys decisions cycle over.
var benchKeys = func() []string {
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "tenant-" + strconv.Itoa(i)
	}
	return keys
}()

// BenchmarkMemory measures in-memory decisions, one goroutine and all
// GOMAXPROCS goroutines, over 10,000 keys, against a baseline: a counter
// increment in a map under one mutex, the least any keyed limiter does.
func BenchmarkMemory(b *testing.B) {
	ctx := context.Background()
	var mu sync.Mutex
	counts := make(map[string]int64)
	for _, k := range benchKeys {
		counts[k] = 0
	}
	increment := func(key string) {
		mu.Lock()
		counts[key]++
		mu.Unlock()
	}
	b.Run("map-baseline/serial", func(b *testing.B) {
		i := 0
		for b.Loop() {
			increment(benchKeys[i%len(benchKeys)])
			i++
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	})
	b.Run("map-baseline/parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				increment(benchKeys[i%len(benchKeys)])
				i += 7
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	})
	for _, alg := range limiter.Algorithms {
		l := benchLimit
		if alg == limiter.SlidingLog {
			l = limiter.Limit{Count: 100, Period: time.Hour} // the log grows with Count
		}
		b.Run(string(alg)+"/serial", func(b *testing.B) {
			m := warmMemory(alg, l)
			i := 0
			for b.Loop() {
				m.Allow(ctx, benchKeys[i%len(benchKeys)])
				i++
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
		b.Run(string(alg)+"/parallel", func(b *testing.B) {
			m := warmMemory(alg, l)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					m.Allow(ctx, benchKeys[i%len(benchKeys)])
					i += 7
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// warmMemory returns a Memory limiter already tracking every bench key, so
// the benchmarks measure steady-state decisions rather than insertions.
func warmMemory(alg limiter.Algorithm, l limiter.Limit) *limiter.Memory {
	m, _ := limiter.NewMemory(alg, l)
	for _, k := range benchKeys {
		m.Allow(context.Background(), k)
	}
	return m
}

// perKeyCases are the states BenchmarkMemoryPerKey and BenchmarkRedisPerKey
// measure: every algorithm after one event per key, and the sliding log,
// which grows with its events, after 100.
var perKeyCases = func() []perKeyCase {
	var cs []perKeyCase
	for _, alg := range limiter.Algorithms {
		cs = append(cs, perKeyCase{string(alg), alg, 1})
	}
	return append(cs, perKeyCase{"sliding_log-100-events", limiter.SlidingLog, 100})
}()

type perKeyCase struct {
	name   string
	alg    limiter.Algorithm
	events int
}

// pingScript is the baseline: a bare EVALSHA round trip of a script that
// returns 1.
var pingScript = redis.NewScript(`return 1`)

// BenchmarkRedis measures Redis decisions against a bare EVALSHA round trip
// measured in the same run, on one connection (latency) and on 4 (throughput).
// x-evalsha is each algorithm's time per decision over the baseline's.
func BenchmarkRedis(b *testing.B) {
	addr := testenv.Redis(b)
	ctx := context.Background()
	for _, mode := range []struct {
		name     string
		conns    int
		parallel bool
	}{{"serial", 1, false}, {"parallel", 4, true}} {
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: mode.conns, ContextTimeoutEnabled: true})
		b.Cleanup(func() { rdb.Close() })
		run := func(b *testing.B, decide func(key string)) float64 {
			if mode.parallel {
				b.SetParallelism(8) // 16 goroutines on 2 cores over 4 connections
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						decide(benchKeys[i%len(benchKeys)])
						i += 7
					}
				})
			} else {
				i := 0
				for b.Loop() {
					decide(benchKeys[i%len(benchKeys)])
					i++
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			return float64(b.Elapsed().Nanoseconds()) / float64(b.N)
		}
		var baseline float64
		b.Run(mode.name+"/evalsha-baseline", func(b *testing.B) {
			if err := pingScript.Run(ctx, rdb, []string{"x"}).Err(); err != nil {
				b.Fatal(err)
			}
			baseline = run(b, func(key string) {
				if err := pingScript.Run(ctx, rdb, []string{key}).Err(); err != nil {
					b.Fatal(err)
				}
			})
		})
		for _, alg := range limiter.Algorithms {
			l := benchLimit
			if alg == limiter.SlidingLog {
				l = limiter.Limit{Count: 100, Period: time.Hour}
			}
			b.Run(mode.name+"/"+string(alg), func(b *testing.B) {
				r, err := limiter.NewRedis(rdb, alg, l, limiter.RedisConfig{Prefix: "bench:" + mode.name + ":", Timeout: 5 * time.Second, NoCache: true})
				if err != nil {
					b.Fatal(err)
				}
				perOp := run(b, func(key string) {
					if _, err := r.Allow(ctx, key); err != nil {
						b.Fatal(err)
					}
				})
				if baseline > 0 {
					b.ReportMetric(perOp/baseline, "x-evalsha")
				}
			})
		}
	}
}

// BenchmarkMemoryPerKey reports the heap each tracked key costs in a
// Memory limiter for perKeyCases (the key string itself not counted).
func BenchmarkMemoryPerKey(b *testing.B) {
	for _, c := range perKeyCases {
		b.Run(c.name, func(b *testing.B) {
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = fmt.Sprintf("key-%09d", i)
			}
			now := time.Now()
			b.ResetTimer()
			before := heapAlloc()
			m, _ := limiter.NewMemory(c.alg, limiter.Limit{Count: 100, Period: time.Hour})
			for _, k := range keys {
				for e := range c.events {
					m.AllowAt(k, now.Add(time.Duration(e)))
				}
			}
			after := heapAlloc()
			b.StopTimer()
			b.ReportMetric(float64(after-before)/float64(b.N), "bytes/key")
			runtime.KeepAlive(m)
		})
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkRedisPerKey reports Redis used_memory per tracked key (key name
// included) for perKeyCases.
func BenchmarkRedisPerKey(b *testing.B) {
	rdb := redis.NewClient(&redis.Options{Addr: testenv.Redis(b), PoolSize: 4})
	b.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	for _, c := range perKeyCases {
		b.Run(c.name, func(b *testing.B) {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			r, err := limiter.NewRedis(rdb, c.alg, limiter.Limit{Count: 100, Period: time.Hour}, limiter.RedisConfig{Timeout: 5 * time.Second, NoCache: true})
			if err != nil {
				b.Fatal(err)
			}
			before := usedMemory(b, rdb)
			for i := range b.N {
				for range c.events {
					if _, err := r.Allow(ctx, fmt.Sprintf("key-%09d", i)); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(usedMemory(b, rdb)-before)/float64(b.N), "bytes/key")
		})
	}
}

func usedMemory(b *testing.B, rdb *redis.Client) int64 {
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatal("INFO memory lacks used_memory")
	return 0
}
