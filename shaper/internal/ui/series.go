package ui

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
)

// Defaults for the zero Config.
const (
	DefaultInterval    = time.Second
	DefaultWindow      = 5 * time.Minute
	DefaultDepthsEvery = 5 * time.Second
	DefaultDeepest     = 10
	// watchedFor is how long after the page last asked the deepest keys
	// are still refreshed: nobody looks at them otherwise.
	watchedFor = 30 * time.Second
)

// Config holds the optional settings of Series. The zero value means the
// documented defaults.
type Config struct {
	// Interval is the time between two samples. Default DefaultInterval.
	Interval time.Duration
	// Window is how far back the series reach. Default DefaultWindow.
	Window time.Duration
	// DepthsEvery is the time between two reads of the deepest keys,
	// made only while the page is open. Default DefaultDepthsEvery.
	DepthsEvery time.Duration
	// Deepest is how many of the deepest keys are kept. Default
	// DefaultDeepest.
	Deepest int
}

// Figures is one policy's counters (since its pipeline started) and
// gauges at an instant.
type Figures struct {
	Policy                                          string
	Admitted, Rejected, Deferred, Delivered, Failed uint64
	Queued, DeferQueued                             int64
	// Rate is the effective rate of an adaptive outflow now, per second
	// (the total's, or the deepest adapting key's), NaN without one.
	Rate float64
}

// Source is what Series samples: the shaper's policy table.
type Source interface {
	// Figures returns every policy's figures now, from memory (it is
	// called every Interval).
	Figures() []Figures
	// Deepest returns the n keys of the policy's queue with the most jobs,
	// deepest first, by key on a tie, from memory: at a cost that does
	// not grow with the keys (drain.Drainer.Deepest).
	Deepest(policy string, n int) []KeyDepth
	// File returns the policy as the policy file says, so that the page
	// can mark what a live override changed.
	File(policy string) (policies.Policy, bool)
}

// KeyDepth is a key with the jobs stored for it.
type KeyDepth struct {
	Key   string `json:"key"`
	Depth uint64 `json:"depth"`
}

// sample is one policy's figures over one interval: rates per second
// (NaN for the first sample, which has nothing to compare with), the
// gauges at its end, and the quantiles of what the drainer did in it in
// milliseconds (NaN when it did nothing).
type sample struct {
	at                                              time.Time
	admitted, rejected, deferred, delivered, failed float64
	queued, deferQueued                             int64
	inQueueP50, inQueueP99, latenessP99             float64
	rate                                            float64 // Figures.Rate
}

// line is one policy's series: a ring of samples over the window, and the
// histograms its Recorder fills between two samples.
type line struct {
	rec Recorder

	// Under Series.mu.
	ring    []sample // len = Window/Interval
	next, n int      // where the next sample goes; how many are kept
	last    Figures  // the counters at the last sample
	// seen is when Figures last listed the policy: the last sample's
	// time once there is one (n > 0), the line's creation before.
	seen      time.Time
	deepest   []KeyDepth
	deepestAt time.Time
}

// Recorder takes one policy's drain events. Its Observe is safe for
// concurrent use and takes no lock.
type Recorder struct {
	inQueue, lateness histogram
}

// Observe records a drain event (drain.Config.OnDeliver): the time a
// delivered job spent in its queue, from its enqueue to the start of its
// delivery, and the lateness of every delivery attempt, from its slot to
// its start.
func (r *Recorder) Observe(e drain.Event) {
	if !e.Attempted {
		return // a dead-lettering, or a pause without an attempt
	}
	r.lateness.Observe(e.Started.Sub(e.Scheduled))
	if e.Err == nil && !e.Enqueued.IsZero() {
		r.inQueue.Observe(e.Started.Sub(e.Enqueued))
	}
}

// Series keeps each policy's figures over the last Window, sampled every
// Interval by Run, for the operator page. Memory is bounded: a ring of
// Window/Interval samples and two fixed histograms per policy; a policy
// gone from the source for a whole window is forgotten. Safe for
// concurrent use.
type Series struct {
	src Source
	cfg Config

	mu      sync.Mutex
	lines   map[string]*line
	buf     [numBuckets]uint64 // quantile scratch, under mu
	watched atomic.Int64       // unix nanoseconds of the page's last read
}

// New returns the Series of src's policies; Run samples them.
func New(src Source, cfg Config) *Series {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.DepthsEvery <= 0 {
		cfg.DepthsEvery = DefaultDepthsEvery
	}
	if cfg.Deepest <= 0 {
		cfg.Deepest = DefaultDeepest
	}
	return &Series{src: src, cfg: cfg, lines: make(map[string]*line)}
}

// Recorder returns the recorder of policy's drain events.
func (s *Series) Recorder(policy string) *Recorder {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &s.lineLocked(policy, time.Now()).rec
}

func (s *Series) lineLocked(policy string, now time.Time) *line {
	l := s.lines[policy]
	if l == nil {
		size := max(int(s.cfg.Window/s.cfg.Interval), 1)
		l = &line{ring: make([]sample, size), seen: now}
		s.lines[policy] = l
	}
	return l
}

// Run samples every Interval, and reads the deepest keys every DepthsEvery
// while the page is open, until ctx ends.
func (s *Series) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { every(ctx, s.cfg.Interval, s.sample) })
	wg.Go(func() {
		every(ctx, s.cfg.DepthsEvery, func(now time.Time) {
			if now.Sub(time.Unix(0, s.watched.Load())) < watchedFor {
				s.readDepths(now)
			}
		})
	})
	wg.Wait()
}

// every calls fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func(time.Time)) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			fn(now)
		}
	}
}

// sample adds a sample at now to every policy's series.
func (s *Series) sample(now time.Time) {
	figs := s.src.Figures()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range figs {
		l := s.lineLocked(f.Policy, now)
		sm := sample{at: now, queued: f.Queued, deferQueued: f.DeferQueued, rate: f.Rate}
		nan := math.NaN()
		sm.admitted, sm.rejected, sm.deferred, sm.delivered, sm.failed = nan, nan, nan, nan, nan
		if dt := now.Sub(l.seen).Seconds(); l.n > 0 && dt > 0 {
			sm.admitted = rate(f.Admitted, l.last.Admitted, dt)
			sm.rejected = rate(f.Rejected, l.last.Rejected, dt)
			sm.deferred = rate(f.Deferred, l.last.Deferred, dt)
			sm.delivered = rate(f.Delivered, l.last.Delivered, dt)
			sm.failed = rate(f.Failed, l.last.Failed, dt)
		}
		n := l.rec.inQueue.take(&s.buf)
		sm.inQueueP50, sm.inQueueP99 = quantile(&s.buf, n, 0.5), quantile(&s.buf, n, 0.99)
		n = l.rec.lateness.take(&s.buf)
		sm.latenessP99 = quantile(&s.buf, n, 0.99)
		l.last, l.seen = f, now
		l.ring[l.next] = sm
		l.next = (l.next + 1) % len(l.ring)
		l.n = min(l.n+1, len(l.ring))
	}
	for name, l := range s.lines {
		if now.Sub(l.seen) > s.cfg.Window {
			delete(s.lines, name)
		}
	}
}

// rate is the per-second rate of a counter that went from was to now in
// dt seconds; a counter that went back started again from zero.
func rate(now, was uint64, dt float64) float64 {
	if now < was {
		return float64(now) / dt
	}
	return float64(now-was) / dt
}

// readDepths reads every policy's deepest keys.
func (s *Series) readDepths(now time.Time) {
	for _, name := range s.names() {
		top := s.src.Deepest(name, s.cfg.Deepest)
		s.mu.Lock()
		if l := s.lines[name]; l != nil {
			l.deepest, l.deepestAt = top, now
		}
		s.mu.Unlock()
	}
}

// names returns the policies with a series, sorted.
func (s *Series) names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.lines))
	for n := range s.lines {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
