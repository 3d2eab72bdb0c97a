package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/shaper/traffic"
)

// traceConfig checks the flags only send --trace has: the trace says the keys,
// sizes and times, so --jobs, --keys, --key, --key-prefix, --rate and
// --size must not be given.
func traceConfig(c *cli.Context, cfg sendConfig) (sendConfig, error) {
	for _, f := range []string{"jobs", "keys", "key", "key-prefix", "rate", "size"} {
		if c.IsSet(f) {
			return cfg, fmt.Errorf("send: --%s and --trace: the trace says which jobs to send", f)
		}
	}
	if !(cfg.speed > 0) || math.IsInf(cfg.speed, 0) {
		return cfg, fmt.Errorf("send: --speed %v: want a positive factor", cfg.speed)
	}
	f, err := os.Open(cfg.trace)
	if err != nil {
		return cfg, fmt.Errorf("send: --trace: %w", err)
	}
	f.Close()
	return cfg, nil
}

// feedTrace hands the workers the jobs of the trace at path, each at its
// time (divided by speed) after start, as the trace is read, until it ends
// or ctx does. It returns how many keys the jobs it handed out had.
func feedTrace(ctx context.Context, path string, speed float64, start time.Time, jobs chan<- sendJob) (keys int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r := traffic.NewReader(f)
	seen := make(map[string]struct{})
	var payload []byte
	for i := 0; ; i++ {
		rec, err := r.Read()
		if err == io.EOF {
			return len(seen), nil
		}
		if err != nil {
			return len(seen), err
		}
		seen[rec.Key] = struct{}{}
		if rec.Size > len(payload) {
			payload = letters(max(rec.Size, 2*len(payload)))
		}
		due := start.Add(time.Duration(float64(rec.At) / speed))
		if !sleepUntil(ctx, due) {
			return len(seen), nil
		}
		select {
		case jobs <- sendJob{i: i, key: rec.Key, payload: payload[:rec.Size], due: due}:
		case <-ctx.Done():
			return len(seen), nil
		}
	}
}
