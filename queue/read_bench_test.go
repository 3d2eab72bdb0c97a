package queue_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// BenchmarkRead measures what a drainer asks of the queue per delivery:
// reading a job by its sequence (get) and removing it (remove), with
// benchParallelism × GOMAXPROCS goroutines at once, over b.N jobs stored
// on benchKeys keys before the timer starts. cpu-µs/op is the whole
// process's CPU: client and embedded JetStream together.
func BenchmarkRead(b *testing.B) {
	for _, what := range []string{"get", "remove"} {
		b.Run(what, func(b *testing.B) {
			_, q := benchQueue(b)
			ctx := context.Background()
			tokens := make([]string, b.N)
			seqs := make([]uint64, b.N)
			pending := make([]*queue.Pending, 0, 1024)
			wait := func() {
				for _, p := range pending {
					r, err := p.Wait()
					if err != nil {
						b.Fatal(err)
					}
					seqs[r.Seq-1] = r.Seq
				}
				pending = pending[:0]
			}
			for i := range b.N {
				key := fmt.Sprintf("k%d", i%benchKeys)
				var err error
				if tokens[i], err = queue.EncodeKey(key); err != nil {
					b.Fatal(err)
				}
				pending = append(pending, q.AdmitAsync(queue.Job{Key: key, Payload: benchPayload}))
				if len(pending) == cap(pending) {
					wait()
				}
			}
			wait()
			cpuPerOp(b, func(i int) error {
				if what == "get" {
					_, err := q.Get(ctx, tokens[i], seqs[i])
					return err
				}
				return q.Remove(ctx, seqs[i])
			}, nil)
		})
	}
}

// cpuPerOp runs op on 0..b.N-1 with benchParallelism × GOMAXPROCS
// goroutines, then settle (when set) before the timer stops, and reports
// the process's CPU per op as cpu-µs/op.
func cpuPerOp(b *testing.B, op func(i int) error, settle func()) {
	var n atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := op(int(n.Add(1) - 1)); err != nil {
				b.Error(err)
				return
			}
		}
	})
	if settle != nil {
		settle()
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/float64(time.Microsecond), "cpu-µs/op")
}

// cpuTime returns the CPU time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
