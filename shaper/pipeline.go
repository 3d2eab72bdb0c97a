package shaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
	"github.com/shaper-dev/shaper/shaper/internal/deadletter"
	"github.com/shaper-dev/shaper/shaper/internal/jobs"
)

// Deferred jobs of policy p wait in their own stream, SHAPER_DEFER_<p> on
// shaper.deferred.<p>.<key token>: message schedules cannot live in the
// DiscardNew queue stream, and a separate per-key FIFO keeps deferred jobs
// of a key in submission order. A second Drainer "delivers" them back into
// the policy's queue (admission.Gate.Readmitter).
const (
	deferSubjectRoot  = "shaper.deferred"
	deferStreamPrefix = "SHAPER_DEFER_"
	deferWorkers      = 8
)

// pipeline is everything a Shaper runs for one policy: its admission gate,
// its queue and the drainer delivering it, and its deferred jobs with the
// drainer re-admitting them.
type pipeline struct {
	gate       *admission.Gate
	queue      *queue.Queue
	drain      *drain.Drainer
	deferQueue *queue.Queue
	deferDrain *drain.Drainer
	waiting    func() time.Time   // since when deliveries find no consumer (nil: not a NATS request sink)
	override   atomic.Bool        // the live policy is a stored override
	stopLease  context.CancelFunc // stops holding the policy's drain lease
}

// openPipeline opens p's streams (queue, deferred jobs, dead letters) with
// ctx, and its gate and its drainers, which run until runCtx ends, passive
// until this shaper holds p's lease.
func (s *Shaper) openPipeline(runCtx, ctx context.Context, p policies.Policy) (*pipeline, error) {
	qcfg := queue.Config{
		Replicas:   s.cfg.Replicas,
		MaxPayload: s.cfg.MaxPayload,
		Timeout:    s.cfg.Timeout,
		Logger:     s.log,
	}
	q, err := queue.Open(ctx, s.js, p.Name, p.Queue, qcfg)
	if err != nil {
		return nil, err
	}
	dcfg := qcfg
	dcfg.SubjectRoot, dcfg.StreamPrefix = deferSubjectRoot, deferStreamPrefix
	deferQ, err := queue.Open(ctx, s.js, p.Name, admission.DeferredSize(p), dcfg)
	if err != nil {
		return nil, fmt.Errorf("deferred stream: %w", err)
	}
	if err := s.dead.Open(ctx, p.Name); err != nil {
		return nil, err
	}
	sink, err := s.sinkFor(ctx, p)
	if err != nil {
		return nil, err
	}
	gate, err := admission.New(p, q, deferQ, admission.Config{
		Redis:   s.rdb,
		Shapers: s.cluster.Shapers,
		Logger:  s.log,
		OnDefer: func(id, key string, next time.Time) {
			s.jobs.Put(jobs.Record{ID: id, Policy: p.Name, Key: key, Status: jobs.Deferred, NextTry: next})
		},
		OnReadmit: func(id, key string, deferrals int) {
			s.jobs.Put(jobs.Record{ID: id, Policy: p.Name, Key: key, Status: jobs.Queued, Deferrals: deferrals})
		},
		Observe: s.recorder.Observe(p.Name),
	})
	if err != nil {
		return nil, fmt.Errorf("admit: %w", err)
	}
	line := &pipeline{gate: gate, queue: q, deferQueue: deferQ}
	if ns, ok := sink.(*drain.NATSSink); ok {
		line.waiting = ns.Waiting
	}
	line.drain = drain.New(q, s.observe(p.Name, sink), admission.Pace(p), drain.Config{
		Workers:    s.cfg.Workers,
		Logger:     s.log,
		DeadLetter: s.dead.Func(p.Name, deadletter.FromQueue),
		FailReason: drain.ReasonDelivery,
		OnDeliver:  s.onDeliver(p.Name, s.recordDelivery(p.Name)),
		Resume:     s.failedAttempts,
		Passive:    true, // until this shaper holds the policy's lease
	})
	line.deferDrain = drain.New(deferQ, gate.Readmitter(), admission.DeferPace(p), drain.Config{
		Workers:     deferWorkers,
		Logger:      s.log.With("path", "deferred"),
		DeadLetter:  s.dead.Func(p.Name, deadletter.FromDeferred),
		FailReason:  drain.ReasonAttempts,
		CountPauses: true,
		OnDeliver:   s.recordDeferred(p.Name),
		Passive:     true,
	})
	gate.Attach(line.drain, line.deferDrain)
	line.drain.Start(runCtx)
	line.deferDrain.Start(runCtx)
	return line, nil
}

// setActive starts (true) or stops (false) the pipeline's deliveries and
// re-admissions: this shaper took or lost the policy's lease.
func (line *pipeline) setActive(on bool) {
	line.drain.SetActive(on)
	line.deferDrain.SetActive(on)
}

// holdUntil bounds the pipeline's deliveries and re-admissions to the end
// of the policy's drain lease as this shaper's monotonic clock reads it
// (drain.Drainer.HoldUntil); the zero time removes the bound.
func (line *pipeline) holdUntil(until time.Time) {
	line.drain.HoldUntil(until)
	line.deferDrain.HoldUntil(until)
}

// stop finishes the deliveries in flight (until ctx ends) and stops the
// drainers; queued jobs stay in JetStream.
func (line *pipeline) stop(ctx context.Context, log *slog.Logger) {
	var wg sync.WaitGroup
	for _, d := range []*drain.Drainer{line.drain, line.deferDrain} {
		wg.Go(func() {
			if err := d.Drain(ctx); err != nil {
				log.Warn("drain at shutdown", "policy", line.gate.Policy().Name, "err", err)
			}
			d.Stop()
		})
	}
	wg.Wait()
}

// sinkFor returns the sink p's jobs are delivered to.
func (s *Shaper) sinkFor(ctx context.Context, p policies.Policy) (drain.Sink, error) {
	if p.Deliver.Webhook != "" {
		return drain.NewWebhookSink(p.Deliver.Webhook, p.Deliver.Timeout, nil), nil
	}
	if name := p.Deliver.Stream; name != "" {
		// Deliveries into a stream need the stream: create it when missing,
		// leave an operator's own stream as it is.
		_, err := s.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			_, err = s.js.CreateStream(ctx, jetstream.StreamConfig{
				Name:       name,
				Subjects:   []string{p.DeliverSubject() + ".>"},
				Replicas:   s.cfg.Replicas,
				Duplicates: 2 * time.Minute,
			})
		}
		if err != nil {
			return nil, fmt.Errorf("delivery stream %s: %w", name, err)
		}
	}
	return drain.NewNATSSink(s.nc, drain.NATSConfig{
		Subject: p.DeliverSubject(),
		Stream:  p.Deliver.Stream != "",
		Publish: p.Deliver.Mode == policies.DeliverPublish,
		Timeout: p.Deliver.Timeout,
	})
}

// recordDelivery keeps the job records of delivered and failing jobs, and
// has the operator page's series record every event.
func (s *Shaper) recordDelivery(policy string) func(drain.Event) {
	series := s.series.Recorder(policy)
	return func(e drain.Event) {
		if e.Err != nil && notAttempted(e.Err) {
			// Waiting for a consumer (or for room) is not an attempt: the
			// job's status says so without a record.
			return
		}
		series.Observe(e)
		switch {
		case e.Reason != "":
			// dead-lettered: recorded by the dead letters
		case e.Err == nil:
			s.jobs.Put(jobs.Record{ID: e.ID, Policy: policy, Key: e.Key, Status: jobs.Delivered, Attempts: e.Attempt})
		default:
			s.jobs.Put(jobs.Record{ID: e.ID, Policy: policy, Key: e.Key, Status: jobs.Queued, Attempts: e.Attempt - 1, NextTry: e.RetryAt, LastError: e.Err.Error()})
		}
	}
}

// failedAttempts says how many failed delivery attempts the job records
// count for m (drain.Config.Resume): a job failing when its shaper stopped
// resumes with its attempts, so Shaper-Attempt and the retry bounds count
// across restarts and take-overs.
func (s *Shaper) failedAttempts(ctx context.Context, m *queue.Msg) int {
	rec, err := s.jobs.Get(ctx, m.ID)
	if err != nil || rec.Status != jobs.Queued {
		return 0 // no record (never failed), or one that says nothing of attempts
	}
	return rec.Attempts
}

// notAttempted says whether err is a sink's pause without an attempt.
func notAttempted(err error) bool {
	var pause *drain.RetryAfterError
	return errors.As(err, &pause) && pause.NotAttempted
}

// recordDeferred keeps the job records of deferred jobs whose re-admission
// failed (waiting for room is not a failure).
func (s *Shaper) recordDeferred(policy string) func(drain.Event) {
	return func(e drain.Event) {
		var ra *drain.RetryAfterError
		if e.Err != nil && !(errors.As(e.Err, &ra) && ra.NotAttempted) {
			s.jobs.Put(jobs.Record{ID: e.ID, Policy: policy, Key: e.Key, Status: jobs.Deferred, Deferrals: e.Attempt - 1, NextTry: e.RetryAt, LastError: e.Err.Error()})
		}
	}
}
