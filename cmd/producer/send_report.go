package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// failures is the error of a run in which jobs failed: answered neither
// queued nor refused (429 or deferred), or not answered at all.
func failures(s sendSummary) error {
	var failed int64
	var parts []string
	for o := outClient; o < numOutcomes; o++ {
		if n := s.Outcomes[o.String()]; n > 0 {
			failed += n
			parts = append(parts, fmt.Sprintf("%s %d", o, n))
		}
	}
	if failed == 0 {
		return nil
	}
	return fmt.Errorf("send: %d of %d jobs failed (%s); first error: %s", failed, s.Sent, strings.Join(parts, ", "), s.FirstError)
}

// latencyOf summarises the durations the workers measured, each worker's
// in its own slice.
func latencyOf(perWorker [][]time.Duration) latencyMs {
	all := slices.Concat(perWorker...)
	slices.Sort(all)
	l := latencyMs{P50: ms(percentile(all, 0.50)), P90: ms(percentile(all, 0.90)), P99: ms(percentile(all, 0.99))}
	if len(all) > 0 {
		l.Max = ms(all[len(all)-1])
	}
	return l
}

// startSendProgress prints a progress line on w once a second until the
// returned stop is called. On a terminal the line is rewritten in place.
func startSendProgress(w io.Writer, tty bool, run *sendRun, start time.Time) (stop func()) {
	var last int64
	lastAt := start
	return startProgress(&lineWriter{w: w, tty: tty}, time.Second, func(now time.Time) string {
		var c [numOutcomes]int64
		var sent int64
		for o := range numOutcomes {
			c[o] = run.counts[o].Load()
			sent += c[o]
		}
		rate := float64(sent-last) / now.Sub(lastAt).Seconds()
		last, lastAt = sent, now
		return fmt.Sprintf("%5.0fs  sent %d  %.0f/s  202 %d  429 %d (deferred %d)  other %d",
			now.Sub(start).Seconds(), sent, rate, c[outQueued], c[outRejected]+c[outDeferred], c[outDeferred],
			sent-c[outQueued]-c[outRejected]-c[outDeferred])
	})
}

func printSendSummary(w io.Writer, s sendSummary) {
	fmt.Fprintf(w, "sent %d jobs for policy %s over %d keys to %s in %.2fs: %.1f/s\n",
		s.Sent, s.Policy, s.Keys, s.Target, s.ElapsedSec, s.PerSec)
	if s.Interrupted {
		fmt.Fprintln(w, "interrupted: requests in flight were not counted")
	}
	if l := s.LateMs; l != nil {
		fmt.Fprintf(w, "late after the trace's times, ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", l.P50, l.P90, l.P99, l.Max)
	}
	for o := range numOutcomes {
		if n := s.Outcomes[o.String()]; n > 0 || o <= outDeferred {
			fmt.Fprintf(w, "  %-10s %d\n", o, n)
		}
	}
	if len(s.Details) > 0 {
		keys := make([]string, 0, len(s.Details))
		for k := range s.Details {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s: %d", k, s.Details[k])
		}
		fmt.Fprintf(w, "answers: %s\n", strings.Join(parts, ", "))
	}
	l := s.LatencyMs
	fmt.Fprintf(w, "latency ms: p50 %.2f  p90 %.2f  p99 %.2f  max %.2f\n", l.P50, l.P90, l.P99, l.Max)
	if s.FirstError != "" {
		fmt.Fprintf(w, "first error: %s\n", s.FirstError)
	}
}
