package main

import (
	"context"
	"time"
)

// sendJob is one submission for a worker: the i-th, to key, with payload;
// due is when it should start (with --trace), zero when as soon as possible.
type sendJob struct {
	i       int
	key     string
	payload []byte
	due     time.Time
}

// feedCount hands the workers --jobs jobs round-robin over the keys, at most
// at --rate, until ctx ends.
func feedCount(ctx context.Context, cfg sendConfig, start time.Time, payload []byte, jobs chan<- sendJob) {
	next := start
	for i := 0; cfg.jobs == 0 || i < cfg.jobs; i++ {
		if cfg.interval > 0 {
			now := time.Now()
			if next.Before(now.Add(-cfg.interval)) {
				next = now // fell behind: do not make up for it with a burst
			}
			if !sleepUntil(ctx, next) {
				return
			}
			next = next.Add(cfg.interval)
		}
		select {
		case jobs <- sendJob{i: i, key: cfg.keys[i%len(cfg.keys)], payload: payload}:
		case <-ctx.Done():
			return
		}
	}
}

// sleepUntil waits until t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// letters returns a payload of n bytes, the alphabet over and over.
func letters(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}
