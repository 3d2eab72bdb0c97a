package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/client"
)

// The measured policy, and the one the filling shaper serves instead.
const (
	policyName = "startup"
	fillName   = "startup_fill"
	queueSize  = 10 // per key: each key holds one job
	// countAt is the delivery the third figure is taken at.
	countAt = 1000
)

// bench is one run's shared state: its configuration, its temporary
// directory, its children and the shaper binary.
type bench struct {
	cfg    config
	dir    string
	g      *benchkit.Group
	shaper string
	logf   func(format string, a ...any) // progress, on stderr
}

// row is the start-up of a shaper on a store holding one job on each of
// keys keys. Durations run from the instant the process was started.
type row struct {
	keys       int
	fillRate   float64 // jobs stored a second while filling
	ready      time.Duration
	connected  time.Duration // the consumer's subscription reached the server
	first      time.Duration
	thousand   time.Duration // the countAt-th delivery (or the last, with fewer keys)
	all        time.Duration // the last delivery (with -all)
	tenth      time.Duration // the delivery of N/10 jobs (with -all)
	half       time.Duration // … of N/2
	cpuFirst   float64       // the shaper's CPU seconds at the first delivery
	cpuAt      float64       // … at the countAt-th
	rss        float64       // bytes, at the countAt-th delivery
	peak       float64       // the peak RSS, at the end of the measurement
	dups       int
	rssAtReady float64
	profile    string // the CPU profile's file
	heap       string // the heap profile's file, taken at the milestone
}

// startShaper starts a shaper with a policy file naming policy, on data
// directory data. It does not wait for it.
func (b *bench) startShaper(name, policy, data string) (*benchkit.Shaper, error) {
	return b.g.StartShaper(benchkit.ShaperConfig{
		Name:       name,
		Bin:        b.shaper,
		PolicyFile: filepath.Join(b.dir, name+".yaml"),
		Policy:     benchkit.Policy(policy, "10/s", queueSize, b.cfg.partitions),
		Data:       data,
		LogLevel:   "info",
	})
}

// readyPoll is how often /readyz is polled: the ready time's resolution.
const readyPoll = 10 * time.Millisecond

// measure fills a store with one job on each of n keys, restarts the
// shaper on it and measures the restart.
func (b *bench) measure(ctx context.Context, n int) (row, error) {
	data := filepath.Join(b.dir, fmt.Sprintf("data-%d", n))
	r := row{keys: n}
	var err error
	if r.fillRate, err = b.fill(ctx, n, data); err != nil {
		return r, fmt.Errorf("fill: %w", err)
	}
	b.logf("%d keys: filled at %.0f jobs/s; restarting", n, r.fillRate)
	s, err := b.startShaper(fmt.Sprintf("shaper-%d", n), policyName, data)
	if err != nil {
		return r, err
	}
	c := newConsumer(n, s.P.Pid())
	defer c.close()
	if err := c.connect(s.NATSURL, fmt.Sprintf("shaper.out.%s.>", policyName)); err != nil {
		return r, err
	}
	defer func() {
		if !s.P.Stop(30 * time.Second) {
			b.logf("%s did not stop within 30 s of SIGTERM: killed", s.P.Name)
		}
	}()
	readyAt, err := s.AwaitReady(ctx, readyPoll, benchkit.Phase(n))
	if err != nil {
		return r, err
	}
	r.ready = readyAt.Sub(s.P.Started)
	if r.rssAtReady, _, err = benchkit.Memory(s.P.Pid()); err != nil {
		return r, err
	}
	var prof chan error
	if b.cfg.profile != "" {
		r.profile = filepath.Join(b.cfg.profile, fmt.Sprintf("startup-%d.pprof", n))
		prof = make(chan error, 1)
		go func() {
			prof <- pprof(ctx, s, fmt.Sprintf("profile?seconds=%d", b.cfg.profileSecs), r.profile)
		}()
	}
	if err := c.await(ctx, s.P, c.reached, benchkit.Phase(n)); err != nil {
		return r, err
	}
	if b.cfg.profile != "" {
		r.heap = filepath.Join(b.cfg.profile, fmt.Sprintf("startup-%d.heap.pprof", n))
		if err := pprof(ctx, s, "heap", r.heap); err != nil {
			return r, fmt.Errorf("heap profile: %w", err)
		}
	}
	if b.cfg.all {
		if err := c.await(ctx, s.P, c.all, benchkit.Phase(n)); err != nil {
			return r, err
		}
	}
	_, peak, err := benchkit.Memory(s.P.Pid()) // the peak so far: VmHWM only grows
	if err != nil {
		return r, err
	}
	if prof != nil {
		if err := <-prof; err != nil {
			return r, fmt.Errorf("profile: %w", err)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	since := func(t time.Time) time.Duration {
		if t.IsZero() {
			return 0
		}
		return t.Sub(s.P.Started)
	}
	r.connected, r.first, r.thousand, r.all = since(c.connectedAt), since(c.firstAt), since(c.milestoneAt), since(c.lastAt)
	r.cpuFirst, r.cpuAt, r.rss, r.peak, r.dups = c.cpuFirst, c.cpuAt, c.rss, peak, c.dups
	r.tenth, r.half = since(c.tenthAt), since(c.halfAt)
	if !b.cfg.all {
		r.all, r.tenth, r.half = 0, 0, 0
	}
	return r, nil
}

// pprof writes the /debug/pprof/<what> of shaper s to file.
func pprof(ctx context.Context, s *benchkit.Shaper, what, file string) error {
	body, err := s.Pprof(ctx, what)
	if err != nil {
		return err
	}
	return os.WriteFile(file, body, 0o644)
}

// fill starts a shaper serving another policy on data, stores one job on
// each of n keys in the measured policy's queue and stops the shaper. It
// returns the jobs stored a second.
func (b *bench) fill(ctx context.Context, n int, data string) (float64, error) {
	s, err := b.startShaper(fmt.Sprintf("fill-%d", n), fillName, data)
	if err != nil {
		return 0, err
	}
	defer s.P.Stop(30 * time.Second)
	if _, err := s.AwaitReady(ctx, readyPoll, time.Minute); err != nil {
		return 0, err
	}
	nc, err := nats.Connect(s.NATSURL, nats.Name("startup-fill"))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(2*b.cfg.window),
		jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return 0, err
	}
	// The shaper opens the queue with these settings too (its defaults):
	// its restart finds the stream as it would have made it.
	q, err := queue.Open(ctx, js, policyName, queueSize, queue.Config{})
	if err != nil {
		return 0, err
	}
	payload := bytes.Repeat([]byte("x"), b.cfg.payload)
	start := time.Now()
	// A window of publishes in flight: the producer blocks on a full
	// channel, the waiter takes the acks in order.
	inflight := make(chan *queue.Pending, b.cfg.window)
	waited := make(chan error, 1)
	go func() {
		var first error
		for p := range inflight {
			if _, err := p.Wait(); err != nil && first == nil {
				first = err
			}
		}
		waited <- first
	}()
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		inflight <- q.AdmitAsync(queue.Job{Key: "k" + strconv.Itoa(i), Payload: payload})
	}
	close(inflight)
	if err := <-waited; err != nil {
		return 0, err
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	rate := float64(n) / time.Since(start).Seconds()
	st, err := js.Stream(ctx, q.Stream())
	if err != nil {
		return 0, err
	}
	if got := st.CachedInfo().State; got.Msgs != uint64(n) || got.NumSubjects != uint64(n) {
		return 0, fmt.Errorf("stream %s holds %d jobs on %d subjects, want %d on %d", q.Stream(), got.Msgs, got.NumSubjects, n, n)
	}
	nc.Close()
	if !s.P.Stop(30 * time.Second) {
		return 0, fmt.Errorf("%s did not stop within 30 s of SIGTERM", s.P.Name)
	}
	return rate, nil
}

// consumer answers every delivery on the restarted shaper's NATS, from
// before it listens, and notes when the deliveries came. It samples the
// shaper's CPU time at the first delivery, and its CPU time and memory at
// the milestone (the countAt-th delivery, or the last with fewer keys).
type consumer struct {
	nc        *nats.Conn
	pid       int
	keys      int
	milestone int
	reached   chan struct{} // closed at the milestone
	all       chan struct{} // closed once every key's job came

	mu    sync.Mutex
	seen  map[string]struct{}
	count int
	dups  int

	connectedAt, firstAt, milestoneAt, lastAt time.Time
	cpuFirst, cpuAt                           float64
	rss                                       float64
	tenthAt, halfAt                           time.Time // N/10 and N/2 jobs delivered
}

func newConsumer(keys, pid int) *consumer {
	return &consumer{pid: pid, keys: keys, milestone: min(countAt, keys), seen: make(map[string]struct{}, keys),
		reached: make(chan struct{}), all: make(chan struct{})}
}

// connect subscribes to subject on url, retrying the connection every
// 10 ms until the server listens; it returns at once.
func (c *consumer) connect(url, subject string) error {
	var once sync.Once
	note := func(*nats.Conn) {
		once.Do(func() {
			c.mu.Lock()
			c.connectedAt = time.Now()
			c.mu.Unlock()
		})
	}
	nc, err := nats.Connect(url, nats.Name("startup-consumer"), nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond), nats.ReconnectJitter(0, 0),
		nats.ConnectHandler(note), nats.ReconnectHandler(note))
	if err != nil {
		return err
	}
	if nc.IsConnected() {
		note(nc)
	}
	c.nc = nc
	sub, err := nc.Subscribe(subject, c.take)
	if err != nil {
		return err
	}
	return sub.SetPendingLimits(-1, -1)
}

// take answers one delivery and counts it.
func (c *consumer) take(m *nats.Msg) {
	if err := m.Respond(nil); err != nil {
		return // not counted: the shaper delivers it again
	}
	now := time.Now()
	id := m.Header.Get(client.HeaderJobID)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count++
	if _, ok := c.seen[id]; ok {
		c.dups++
		return
	}
	c.seen[id] = struct{}{}
	n := len(c.seen)
	switch n {
	case c.keys / 10:
		c.tenthAt = now
	case c.keys / 2:
		c.halfAt = now
	}
	if n == 1 {
		c.firstAt = now
		c.cpuFirst, _ = benchkit.CPUSeconds(c.pid)
	}
	if n == c.milestone {
		c.milestoneAt = now
		c.cpuAt, _ = benchkit.CPUSeconds(c.pid)
		c.rss, _, _ = benchkit.Memory(c.pid)
		close(c.reached)
	}
	if n == c.keys {
		c.lastAt = now
		close(c.all)
	}
}

// await waits until ch is closed, failing if the shaper p exits first or
// nothing closes it within.
func (c *consumer) await(ctx context.Context, p *benchkit.Proc, ch chan struct{}, within time.Duration) error {
	select {
	case <-ch:
		return nil
	case <-p.Done():
		return fmt.Errorf("%s exited; its log:\n%s", p.Name, p.Tail())
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(within):
		return fmt.Errorf("%d of %d jobs delivered within %v; %s's log:\n%s", c.delivered(), c.keys, within, p.Name, p.Tail())
	}
}

func (c *consumer) delivered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

func (c *consumer) close() {
	if c.nc != nil {
		c.nc.Close()
	}
}
