package integration

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// rssSample is the shaper's resident memory at a moment of the load phase.
type rssSample struct {
	at        time.Duration
	rss       float64 // bytes
	delivered int     // jobs received since the load began
	backlog   int     // jobs answered 202 and not yet received
}

// rss returns the resident set of process pid in bytes, read from
// /proc/PID/status as any outside observer would.
func rss(t *testing.T, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Errorf("read the RSS of %d: %v", pid, err)
		return math.NaN()
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	t.Errorf("no VmRSS in /proc/%d/status", pid)
	return math.NaN()
}

// cpuTime returns the user and system CPU time process pid used so far
// (/proc/PID/stat, in clock ticks of 10 ms).
func cpuTime(t *testing.T, pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Errorf("read the CPU time of %d: %v", pid, err)
		return 0
	}
	_, rest, _ := strings.Cut(string(b), ") ") // the command name may hold spaces
	f := strings.Fields(rest)
	if len(f) < 13 {
		t.Errorf("/proc/%d/stat: %q", pid, b)
		return 0
	}
	user, _ := strconv.ParseInt(f[11], 10, 64)
	sys, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(user+sys) * 10 * time.Millisecond
}

// sampleAt returns the first sample at or after at (the last one if none).
func sampleAt(samples []rssSample, at time.Duration) rssSample {
	for _, s := range samples {
		if s.at >= at {
			return s
		}
	}
	if n := len(samples); n > 0 {
		return samples[n-1]
	}
	return rssSample{rss: math.NaN()}
}

// slope estimates how RSS grows with the jobs delivered over the samples
// after warm: the median of the slopes between every two samples (Theil and
// Sen), which a garbage collection's passing peak does not sway. It
// returns the slope in bytes a job, the jobs delivered over those samples,
// and the fitted RSS at their first and last.
func slope(samples []rssSample, warm time.Duration) (perJob float64, jobs int, from, to float64) {
	var xs, ys []float64
	for _, s := range samples {
		if s.at >= warm && !math.IsNaN(s.rss) {
			xs, ys = append(xs, float64(s.delivered)), append(ys, s.rss)
		}
	}
	if len(xs) < 3 {
		return math.NaN(), 0, math.NaN(), math.NaN()
	}
	var slopes []float64
	for i := range xs {
		for j := i + 1; j < len(xs); j++ {
			if xs[j] > xs[i] {
				slopes = append(slopes, (ys[j]-ys[i])/(xs[j]-xs[i]))
			}
		}
	}
	perJob = median(slopes)
	rest := make([]float64, len(xs))
	for i := range xs {
		rest[i] = ys[i] - perJob*xs[i]
	}
	intercept := median(rest)
	first, last := xs[0], xs[len(xs)-1]
	return perJob, int(last - first), intercept + perJob*first, intercept + perJob*last
}

// envelope returns the samples at or after warm+window with each one's RSS
// replaced by the least RSS of the samples in the window before it (and
// after warm): the trough line under a sawtooth. The embedded JetStream
// keeps the block a stream is writing in memory until the block is full
// (8 MB for a queue stream), so RSS rises and falls by several megabytes
// every 15 s or so at 1,500 jobs a second; a 60-second slope through that
// sawtooth can read 100 bytes a job or more without any job's memory being
// kept, while memory that is kept lifts every trough.
func envelope(samples []rssSample, warm, window time.Duration) []rssSample {
	var out []rssSample
	for i, s := range samples {
		if s.at < warm+window {
			continue
		}
		low := s
		for j := i; j >= 0 && samples[j].at >= warm && s.at-samples[j].at <= window; j-- {
			if samples[j].rss < low.rss {
				low.rss = samples[j].rss
			}
		}
		out = append(out, low)
	}
	return out
}

// median returns the median of vs (reordering them).
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	slices.Sort(vs)
	n := len(vs)
	return (vs[(n-1)/2] + vs[n/2]) / 2
}

// TestTroughSlope checks the soak's estimator on made-up samples: a
// sawtooth like the queue stream's block cache (8 MB every 15 s, at any
// phase) reads near zero, and the same sawtooth over memory kept at 156
// bytes a job (the old binary's) reads that.
func TestTroughSlope(t *testing.T) {
	const rate, period, amp = 1500, 15.0, 8e6
	for _, leak := range []float64{0, 156} {
		for phase := 0.0; phase < period; phase += 2.5 {
			var samples []rssSample
			for s := 1; s <= 90; s++ {
				saw := amp * math.Mod(float64(s)+phase, period) / period
				samples = append(samples, rssSample{at: time.Duration(s) * time.Second, rss: 50e6 + saw + leak*rate*float64(s), delivered: rate * s})
			}
			got, _, _, _ := slope(envelope(samples, 22*time.Second, soakTrough), 0)
			if math.Abs(got-leak) > 10 {
				t.Errorf("leak %.0f bytes a job, sawtooth at phase %.1f s: troughs' slope %.1f", leak, phase, got)
			}
		}
	}
}
