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

// feedTrace hands the workers the jobs of cfg.trace, each at its time
// (divided by cfg.speed) after start, as the trace is read, until it ends
// or ctx does. It counts the trace's keys into cfg.traceKeys.
func feedTrace(ctx context.Context, cfg *sendConfig, start time.Time, jobs chan<- sendJob) error {
	f, err := os.Open(cfg.trace)
	if err != nil {
		return err
	}
	defer f.Close()
	r := traffic.NewReader(f)
	keys := make(map[string]struct{})
	var payload []byte
	for i := 0; ; i++ {
		rec, err := r.Read()
		if err == io.EOF {
			cfg.traceKeys = len(keys)
			return nil
		}
		if err != nil {
			return err
		}
		keys[rec.Key] = struct{}{}
		if rec.Size > len(payload) {
			payload = make([]byte, max(rec.Size, 2*len(payload)))
			for j := range payload {
				payload[j] = 'a' + byte(j%26)
			}
		}
		due := start.Add(time.Duration(float64(rec.At) / cfg.speed))
		if !sleepUntil(ctx, due) {
			cfg.traceKeys = len(keys)
			return nil
		}
		select {
		case jobs <- sendJob{i: i, key: rec.Key, payload: payload[:rec.Size], due: due}:
		case <-ctx.Done():
			cfg.traceKeys = len(keys)
			return nil
		}
	}
}
