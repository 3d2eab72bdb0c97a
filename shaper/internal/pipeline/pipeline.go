// Package pipeline builds what runs for one policy — its admission gate,
// the drainer that delivers its queue, and the drainer that re-admits its
// deferred jobs — in one constructor, New, used alike by the live shaper
// (on JetStream queues, started), by the tune replay and by the tests (on
// in-memory queues, driven on a virtual clock). Nothing of admission,
// pacing or re-admission is wired twice, so a replay behaves as the shaper
// does because it runs the same assembly, not because two copies agree.
//
// A live policy change goes through SetPolicy, which applies it to the
// gate and to both drainers' paces at once.
//
// The queue is drained in the policy's partitions (drain.Group): a shaper
// holds the lease of some of them and delivers those (SetPartition). The
// deferred jobs are re-admitted by the holder of partition 0.
package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
)

// DeferWorkers bounds the re-admissions in flight at once for a policy.
const DeferWorkers = 8

// Queue is a store of jobs a pipeline admits into and drains from:
// *queue.Queue (JetStream) in the shaper, *drain.MemQueue in a replay.
type Queue interface {
	admission.Store
	drain.Queue
}

var (
	_ Queue = (*queue.Queue)(nil)
	_ Queue = (*drain.MemQueue)(nil)
)

// DeadLetter takes a job its drainer gives up on (drain.Config.DeadLetter).
type DeadLetter func(ctx context.Context, m *queue.Msg, reason string, history []string) error

// Config holds a pipeline's optional settings; the zero value means the
// drain package's defaults, the real clock, no dead letters (failed jobs
// are retried for ever) and no callbacks.
type Config struct {
	// Workers bounds the deliveries in flight at once (drain.Config.Workers).
	Workers int
	// Clock is the time of both drainers and of the gate's re-admissions.
	// Default: the time package's.
	Clock drain.Clock
	// Jitter draws the backoff jitter of both drainers (drain.Config.Jitter).
	Jitter func() float64
	// Logger receives failures. Default: discard.
	Logger *slog.Logger
	// Passive starts both drainers watching but not delivering, until
	// SetActive(true): a shaper that does not hold the policy's lease.
	Passive bool

	// Gate holds the admission gate's settings; its Now is set from Clock.
	Gate admission.Config

	// OnDeliver is told of every delivery attempt and dead-lettering of the
	// queue's jobs (drain.Config.OnDeliver); OnReadmit of every
	// re-admission attempt and dead-lettering of a deferred job.
	OnDeliver func(drain.Event)
	OnReadmit func(drain.Event)
	// DeadLetter takes the queue's jobs given up on (out of delivery
	// attempts, past the deadline); DeferDeadLetter the deferred jobs
	// given up on (out of re-admission attempts, past the deadline).
	DeadLetter      DeadLetter
	DeferDeadLetter DeadLetter
	// Resume says what delivery attempts a job had before this
	// pipeline's drainer took the policy (drain.Config.Resume).
	Resume func(ctx context.Context, m *queue.Msg) drain.Resumed
}

// Pipeline is one policy's admission and drains. Its methods are safe for
// concurrent use.
type Pipeline struct {
	// Gate decides every submission and re-admission.
	Gate *admission.Gate
	// Drain delivers the queue's jobs to the sink, in the policy's
	// partitions.
	Drain *drain.Group
	// DeferDrain re-admits deferred jobs into the queue when their key has
	// room (Gate.Readmitter).
	DeferDrain *drain.Drainer

	mu sync.Mutex // serialises SetPolicy
}

// New assembles the pipeline of policy p: the gate admitting into q and
// keeping what a full queue refuses in deferred, the drainer delivering q to
// sink at p's pace, and the drainer re-admitting deferred jobs through the
// gate. Nothing runs until Start, or Advance.
func New(p policies.Policy, q, deferred Queue, sink drain.Sink, cfg Config) (*Pipeline, error) {
	if cfg.Clock != nil {
		cfg.Gate.Now = cfg.Clock.Now
	}
	if cfg.Logger != nil && cfg.Gate.Logger == nil {
		cfg.Gate.Logger = cfg.Logger
	}
	gate, err := admission.New(p, q, deferred, cfg.Gate)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	l := &Pipeline{Gate: gate}
	l.Drain = drain.NewGroup(q, p.Parts(), sink, Pace(p), drain.Config{
		Workers:    cfg.Workers,
		Clock:      cfg.Clock,
		Jitter:     cfg.Jitter,
		Logger:     logger,
		OnDeliver:  cfg.OnDeliver,
		DeadLetter: cfg.DeadLetter,
		FailReason: drain.ReasonDelivery,
		Resume:     cfg.Resume,
		Passive:    cfg.Passive,
	})
	l.DeferDrain = drain.New(deferred, gate.Readmitter(), DeferPace(p), drain.Config{
		Workers:     DeferWorkers,
		Clock:       cfg.Clock,
		Jitter:      cfg.Jitter,
		Logger:      logger.With("path", "deferred"),
		OnDeliver:   cfg.OnReadmit,
		DeadLetter:  cfg.DeferDeadLetter,
		FailReason:  drain.ReasonAttempts,
		CountPauses: true, // waiting for room (known, or the store's refusal) is no attempt (NotAttempted); a store failing is
		Passive:     cfg.Passive,
	})
	gate.Attach(l.Drain, l.DeferDrain)
	return l, nil
}

// Pace returns how the drainer of p's queue paces: its outflow interval per
// key, its total cap, its retry bounds and budget, its concurrency and its
// adaptation.
func Pace(p policies.Policy) drain.Pace {
	return drain.Pace{
		Interval: p.Outflow.Interval(),
		Total:    p.Total.Interval(),
		Retry: drain.Retry{
			Attempts:   p.Retry.Attempts,
			Backoff:    p.Retry.Backoff,
			MaxBackoff: p.Retry.MaxBackoff,
			Deadline:   p.Retry.Deadline,
			Budget:     p.Retry.Budget.Share(),
		},
		Adapt:       adaptOf(p.Adapt),
		Concurrency: drain.Concurrency{Key: p.Concurrency.Key, Total: p.Concurrency.Total},
	}
}

// DeferPace returns how the drainer of p's deferred jobs paces: as Pace,
// but deferred jobs are re-admitted strictly in order, one re-admission of
// a key at a time, without a retry budget, and at the fixed outflow (the
// queue they enter is not a downstream to adapt to).
func DeferPace(p policies.Policy) drain.Pace {
	pace := Pace(p)
	pace.Retry.Budget = 0
	pace.Adapt = drain.Adapt{}
	pace.Concurrency = drain.Concurrency{}
	return pace
}

// Policy returns the policy the pipeline runs under now. Do not modify it.
func (l *Pipeline) Policy() *policies.Policy { return l.Gate.Policy() }

// SetPolicy makes p the policy of the whole pipeline: the gate's
// admission and both drainers' paces. On an error nothing changes.
func (l *Pipeline) SetPolicy(p policies.Policy) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.Gate.SetPolicy(p); err != nil {
		return err
	}
	l.Drain.SetPace(Pace(p))
	l.DeferDrain.SetPace(DeferPace(p))
	return nil
}

// Start runs both drainers in the background until ctx ends or Stop.
func (l *Pipeline) Start(ctx context.Context) {
	l.Drain.Start(ctx)
	l.DeferDrain.Start(ctx)
}

// SetPartition says that this shaper holds (until the end of its holding)
// or no longer holds partition i's drain lease: the bound first, then the
// deliveries start; or they stop, the steps in flight end and the slots
// of the jobs delivered are freed (drain.Drainer.Release, for at most
// releaseTimeout), so that the next holder delivers none of them again;
// the last bound stays. The holder of partition 0 also re-admits the
// deferred jobs.
func (l *Pipeline) SetPartition(i int, holding bool, until time.Time) {
	if holding {
		l.Drain.HoldUntil(i, until)
		if i == 0 {
			l.DeferDrain.HoldUntil(until)
		}
		l.Drain.SetActive(i, true)
		if i == 0 {
			l.DeferDrain.SetActive(true)
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { l.Drain.Part(i).Release(ctx) })
	if i == 0 {
		wg.Go(func() { l.DeferDrain.Release(ctx) })
	}
	wg.Wait()
}

// releaseTimeout bounds how long a shaper giving a partition up waits for
// its deliveries in flight and frees the slots of the jobs delivered,
// before the lease goes to the next holder.
const releaseTimeout = 2 * time.Second

// Active reports whether the pipeline delivers.
func (l *Pipeline) Active() bool { return l.Drain.Active() }

// Stop finishes the deliveries and re-admissions in flight (until ctx
// ends) and stops both drainers; queued and deferred jobs stay stored.
func (l *Pipeline) Stop(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() {
		errs[0] = l.Drain.Drain(ctx)
		l.Drain.Stop()
	})
	wg.Go(func() {
		errs[1] = l.DeferDrain.Drain(ctx)
		l.DeferDrain.Stop()
	})
	wg.Wait()
	return errors.Join(errs...)
}

// Advance drives a pipeline on a virtual clock, as a replay does: it runs
// every step of both drainers due at now — deliveries, then re-admissions,
// and again while a re-admission put a job back that may be due at once —
// and returns when the pipeline next needs attention (ok false: not before
// a new submission). The rules of drain.Drainer.Advance apply: Config.Clock
// must read now, and now must not go back.
func (l *Pipeline) Advance(ctx context.Context, now time.Time) (next time.Time, ok bool) {
	for {
		next, ok = l.Drain.Advance(ctx, now)
		before := l.Gate.Counts().Readmitted
		dnext, dok := l.DeferDrain.Advance(ctx, now)
		if l.Gate.Counts().Readmitted != before && ctx.Err() == nil {
			continue // a job went back into its queue: it may be due now
		}
		switch {
		case !ok:
			return dnext, dok
		case dok && dnext.Before(next):
			return dnext, true
		}
		return next, true
	}
}
