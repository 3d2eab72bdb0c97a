// Package downstream is a simulated downstream consumer, a drain.Sink, for
// tests, replays and `shaper tune`: a server of a given capacity (deliveries
// per second, changing over time on a schedule) that queues what it cannot
// serve at once, so that its latency grows while more is offered than it
// serves; a caller that gives up after a timeout; and optionally a bound on
// its queue past which it refuses with 503 and Retry-After.
//
// The model is a fluid queue: a delivery arriving at t starts service once
// the work before it is done (busy until b: it waits max(b − t, 0)), takes
// 1/capacity of the server, and answers after the base latency (with
// jitter) plus its wait. A delivery whose answer would come after the
// timeout times out — and the server still does its work, as a real one
// that does not know the caller left: overload wastes capacity.
//
// A Downstream reads the time from the clock it is given and answers at
// once, saying how long the delivery took in drain.Delivery.Took: on a
// drain's virtual clock (Advance) a replay runs hours of it in seconds.
// With Config.Wait it also waits that long, for a started Drainer. It is
// safe for concurrent use.
package downstream

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/shaper-dev/shaper/drain"
)

// Defaults of a zero Config.
const (
	DefaultLatency = 20 * time.Millisecond // Config.Latency
	DefaultTimeout = time.Second           // Config.Timeout
)

// Phase is a capacity the downstream has from After on (after Start).
type Phase struct {
	After    time.Duration
	Capacity float64 // deliveries per second
}

// Config describes a simulated downstream. Capacity must be positive.
type Config struct {
	// Capacity is how many deliveries per second the downstream serves.
	Capacity float64
	// Phases change the capacity over time, after the start: each applies
	// from its After on (in order of After).
	Phases []Phase
	// Latency is the answer's latency when nothing waits. Default
	// DefaultLatency.
	Latency time.Duration
	// Jitter adds up to this share of Latency, uniformly at random (from
	// Seed: a replay is deterministic).
	Jitter float64
	Seed   uint64
	// Timeout is when the caller gives up on an answer. Default
	// DefaultTimeout.
	Timeout time.Duration
	// QueueLimit, when set, bounds the wait: a delivery that would wait
	// longer is refused at once (503), without taking the server's time,
	// with Retry-After RetryAfter when that is set.
	QueueLimit time.Duration
	RetryAfter time.Duration
	// Wait makes Deliver wait for the answer's latency on the real clock
	// (a started Drainer); otherwise it answers at once.
	Wait bool
}

// Stats counts what a Downstream answered.
type Stats struct {
	Delivered uint64 // accepted in time
	TimedOut  uint64 // answered after the caller's timeout
	Refused   uint64 // refused: the queue was full
}

// Downstream is a simulated downstream. Make one with New.
type Downstream struct {
	cfg   Config
	clock drain.Clock
	start time.Time

	mu    sync.Mutex
	busy  time.Time // when the server is done with the work it has
	rand  *rand.Rand
	stats Stats
}

var _ drain.Sink = (*Downstream)(nil)

// New returns a Downstream whose schedule starts at clock's now.
func New(clock drain.Clock, cfg Config) (*Downstream, error) {
	if cfg.Capacity <= 0 {
		return nil, fmt.Errorf("downstream: capacity %v: want above 0", cfg.Capacity)
	}
	for _, p := range cfg.Phases {
		if p.Capacity <= 0 || p.After < 0 {
			return nil, fmt.Errorf("downstream: phase %v at %v: want a capacity above 0 from a time at or after the start", p.Capacity, p.After)
		}
	}
	if cfg.Latency <= 0 {
		cfg.Latency = DefaultLatency
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	return &Downstream{cfg: cfg, clock: clock, start: clock.Now(), rand: rand.New(rand.NewPCG(cfg.Seed, 1))}, nil
}

// Capacity returns the capacity at now, per second.
func (s *Downstream) Capacity(now time.Time) float64 {
	c := s.cfg.Capacity
	for _, p := range s.cfg.Phases {
		if !now.Before(s.start.Add(p.After)) {
			c = p.Capacity
		}
	}
	return c
}

// Stats returns what the Downstream answered so far.
func (s *Downstream) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Deliver implements drain.Sink: it answers as the model says, at once
// (or after the latency, with Config.Wait), and sets d.Took.
func (s *Downstream) Deliver(ctx context.Context, d *drain.Delivery) error {
	took, err := s.answer(s.clock.Now())
	d.Took = took
	if s.cfg.Wait {
		t := time.NewTimer(took)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", drain.ErrDelivery, ctx.Err())
		}
	}
	return err
}

// answer serves a delivery arriving at now: how long it takes, and how
// it ends.
func (s *Downstream) answer(now time.Time) (time.Duration, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wait := max(s.busy.Sub(now), 0)
	if s.cfg.QueueLimit > 0 && wait > s.cfg.QueueLimit {
		s.stats.Refused++
		if s.cfg.RetryAfter > 0 {
			return 0, &drain.RetryAfterError{After: s.cfg.RetryAfter, Cause: "503 Service Unavailable (simulated)"}
		}
		return 0, fmt.Errorf("%w: 503 Service Unavailable (simulated)", drain.ErrDelivery)
	}
	s.busy = now.Add(wait).Add(time.Duration(float64(time.Second) / s.Capacity(now)))
	took := wait + s.cfg.Latency
	if s.cfg.Jitter > 0 {
		took += time.Duration(s.rand.Float64() * s.cfg.Jitter * float64(s.cfg.Latency))
	}
	if took > s.cfg.Timeout {
		s.stats.TimedOut++
		return s.cfg.Timeout, fmt.Errorf("%w: no answer in %v (simulated): %w", drain.ErrDelivery, s.cfg.Timeout, context.DeadlineExceeded)
	}
	s.stats.Delivered++
	return took, nil
}
