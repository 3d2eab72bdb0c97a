package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
)

// policyName is the measured policy's.
const policyName = "keymem"

// bench is one run's shared state.
type bench struct {
	cfg    config
	env    benchkit.Env
	shaper string
}

// row is one shaper's memory holding keys active keys.
type row struct {
	keys int
	heap heap
	rss  float64 // bytes
	peak float64 // VmHWM
	fill float64 // seconds the submissions took
}

// measure starts a shaper, makes n keys active and reads its memory.
func (b *bench) measure(ctx context.Context, n int) (row, error) {
	name := fmt.Sprintf("shaper-%d", n)
	s, err := b.env.Group.StartShaper(benchkit.ShaperConfig{
		Name:       name,
		Bin:        b.shaper,
		PolicyFile: filepath.Join(b.env.Dir, name+".yaml"),
		Policy:     benchkit.Policy(policyName, "1/h", 2, 0),
		Data:       filepath.Join(b.env.Dir, name),
		LogLevel:   "warn",
	})
	if err != nil {
		return row{}, err
	}
	defer s.P.Stop(30 * time.Second)
	if _, err := s.AwaitReady(ctx, 20*time.Millisecond, time.Minute); err != nil {
		return row{}, err
	}
	c, err := consume(s.NATSURL, "shaper.out."+policyName+".>", n)
	if err != nil {
		return row{}, err
	}
	defer c.nc.Close()
	r := row{keys: n}
	start := time.Now()
	if n > 0 {
		if err := s.Submit(ctx, policyName, 2*n, n, b.cfg.payload, b.cfg.conns); err != nil {
			return r, fmt.Errorf("submit: %w", err)
		}
		r.fill = time.Since(start).Seconds()
		b.env.Logf("%d keys: submitted %d jobs in %.1f s", n, 2*n, r.fill)
		select {
		case <-c.all:
		case <-s.P.Done():
			return r, fmt.Errorf("%s exited; its log:\n%s", name, s.P.Tail())
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(benchkit.Phase(n)):
			return r, fmt.Errorf("%d of %d keys had their first job within %v", c.count(), n, benchkit.Phase(n))
		}
	}
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(b.cfg.settle):
	}
	if r.heap, err = readHeap(ctx, s); err != nil {
		return r, err
	}
	if b.cfg.profile != "" {
		file := filepath.Join(b.cfg.profile, fmt.Sprintf("heap-%d.pb.gz", n))
		body, err := s.Pprof(ctx, "heap")
		if err == nil {
			err = os.WriteFile(file, body, 0o644)
		}
		if err != nil {
			return r, err
		}
	}
	if r.rss, r.peak, err = benchkit.Memory(s.P.Pid()); err != nil {
		return r, err
	}
	return r, nil
}

// readHeap reads the shaper's heap after a GC.
func readHeap(ctx context.Context, s *benchkit.Shaper) (heap, error) {
	body, err := s.Pprof(ctx, "heap?gc=1&debug=1")
	if err != nil {
		return heap{}, err
	}
	return parseHeap(bytes.NewReader(body))
}

// consumer answers every delivery and closes all once want distinct
// subjects (keys) had one.
type consumer struct {
	nc   *nats.Conn
	want int
	all  chan struct{}
	mu   sync.Mutex
	seen map[string]struct{}
}

func consume(url, subject string, want int) (*consumer, error) {
	nc, err := nats.Connect(url, nats.Name("keymem-consumer"))
	if err != nil {
		return nil, err
	}
	c := &consumer{nc: nc, want: want, all: make(chan struct{}), seen: make(map[string]struct{}, want)}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		m.Respond(nil)
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.seen[m.Subject]; ok {
			return
		}
		c.seen[m.Subject] = struct{}{}
		if len(c.seen) == c.want {
			close(c.all)
		}
	})
	if err == nil {
		err = sub.SetPendingLimits(-1, -1)
	}
	if err == nil {
		err = nc.Flush()
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func (c *consumer) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}
