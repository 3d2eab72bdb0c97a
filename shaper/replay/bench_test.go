package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper/replay"
	"github.com/shaper-dev/shaper/shaper/traffic"
)

// BenchmarkRun measures a replay's cost per submission: 1,000 jobs/s over
// 10,000 keys (Poisson), each key at 1/s with a queue of 10, as the
// benchmark of `shaper tune` over an hour of such traffic. One op is one
// submission, admitted (or not) and delivered.
func BenchmarkRun(b *testing.B) {
	const rate = 1000
	src := synthetic(b, traffic.Synth{Duration: time.Duration(max(b.N, 1000)) * time.Second / rate, Rate: rate, Keys: 10_000, Size: 64, Seed: 1})
	p := policy(b, "  - {name: p, outflow: 1/s, queue: 10}\n")
	b.ReportAllocs()
	b.ResetTimer()
	res, err := replay.Run(context.Background(), p, src, replay.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(res.Submitted)/b.Elapsed().Seconds(), "jobs/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(res.Submitted), "ns/job")
}
