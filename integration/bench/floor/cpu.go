package main

import (
	"context"
	"fmt"
	"time"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
)

// sample reads the CPU ticks of every process in ps.
func sample(ps []*benchkit.Proc) ([]int64, error) {
	out := make([]int64, len(ps))
	for i, p := range ps {
		t, err := benchkit.CPUTicks(p.Pid())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		out[i] = t
	}
	return out, nil
}

// settle waits, at most within, until the processes ps together used at
// most one clock tick in 300 ms: the work of the setup before a measurement
// (admission, the watch that follows it) is then over.
func settle(ctx context.Context, ps []*benchkit.Proc, within time.Duration) error {
	deadline := time.Now().Add(within)
	prev, err := sample(ps)
	if err != nil {
		return err
	}
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
		cur, err := sample(ps)
		if err != nil {
			return err
		}
		var d int64
		for i := range cur {
			d += cur[i] - prev[i]
		}
		if d <= 1 {
			return nil
		}
		prev = cur
	}
	return nil // busy for another reason (another tenant's load is not ours): go on
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
