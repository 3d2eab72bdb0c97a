package shaper

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
	"github.com/shaper-dev/shaper/shaper/internal/answers"
	"github.com/shaper-dev/shaper/shaper/internal/deadletter"
	"github.com/shaper-dev/shaper/shaper/internal/jobs"
	"github.com/shaper-dev/shaper/shaper/internal/pipeline"
)

// Deferred jobs of policy p wait in their own stream, SHAPER_DEFER_<p> on
// shaper.deferred.<p>.<key token>: message schedules cannot live in the
// DiscardNew queue stream, and a separate per-key FIFO keeps deferred jobs
// of a key in submission order. The pipeline's second drainer "delivers"
// them back into the policy's queue (admission.Gate.Readmitter).
const (
	deferSubjectRoot  = "shaper.deferred"
	deferStreamPrefix = "SHAPER_DEFER_"
)

// served is a policy this shaper serves: its pipeline (gate and drainers,
// assembled by pipeline.New as a replay assembles its own), on the
// policy's JetStream queue and deferred stream.
type served struct {
	*pipeline.Pipeline
	queue      *queue.Queue
	deferQueue *queue.Queue
	override   atomic.Bool        // the live policy is a stored override
	stopLease  context.CancelFunc // stops holding the policy's drain lease
	answers    *answers.View      // what admission asks the drain: the partitions' holders
}

// openPipeline opens p's streams (queue, deferred jobs, dead letters) with
// ctx, and its pipeline, whose drainers run until runCtx ends, passive
// until this shaper holds p's lease.
func (s *Shaper) openPipeline(runCtx, ctx context.Context, p policies.Policy) (*served, error) {
	qcfg := queue.Config{
		Replicas:         s.cfg.Replicas,
		MaxPayload:       s.cfg.MaxPayload,
		Timeout:          s.cfg.Timeout,
		WatchHeadersOnly: s.cfg.WatchHeadersOnly,
		Reserve:          &s.reserve,
		Logger:           s.log,
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
	line, err := pipeline.New(p, q, deferQ, s.observe(p.Name, sink), pipeline.Config{
		Workers: s.cfg.Workers,
		Logger:  s.log,
		Passive: true, // until this shaper holds the policy's lease
		Gate: admission.Config{
			Redis:   s.rdb,
			Shapers: s.cluster.Shapers,
			OnDefer: func(id, key string, next time.Time) {
				s.jobs.Put(jobs.Record{ID: id, Policy: p.Name, Key: key, Status: jobs.Deferred, NextTry: next})
			},
			OnReadmit: func(id, key string, deferrals int) {
				s.jobs.Put(jobs.Record{ID: id, Policy: p.Name, Key: key, Status: jobs.Queued, Deferrals: deferrals})
			},
			OnDuplicate: func(id, key, of string) {
				s.jobs.Put(jobs.Record{ID: id, Policy: p.Name, Key: key, Status: jobs.Duplicate, DuplicateOf: of})
			},
			Deferred: func(ctx context.Context, id string) (was, still bool, of string) {
				rec := s.jobs.Peek(ctx, id)
				if rec == nil {
					return false, false, ""
				}
				return true, rec.Status == jobs.Deferred, rec.DuplicateOf
			},
			Observe: s.recorder.Observe(p.Name),
			Storage: &s.storage,
		},
		OnDeliver:       s.onDeliver(p.Name, s.recordDelivery(p.Name)),
		OnReadmit:       s.recordDeferred(p.Name),
		DeadLetter:      s.dead.Func(p.Name, deadletter.FromQueue),
		DeferDeadLetter: s.dead.Func(p.Name, deadletter.FromDeferred),
		Resume:          s.failedAttempts,
	})
	if err != nil {
		return nil, fmt.Errorf("admit: %w", err)
	}
	sv := &served{Pipeline: line, queue: q, deferQueue: deferQ}
	var waiting func() time.Time // since when deliveries find no consumer (nil: not a NATS request sink)
	if ns, ok := sink.(*drain.NATSSink); ok {
		waiting = ns.Waiting
	}
	// Admission asks each key's partition's holder, not this shaper's
	// passive drainer: the answers come from the schedule that delivers,
	// and whether a consumer takes its deliveries from the sink that
	// delivers them.
	sv.answers = answers.New(s.nc, p.Name, line.Drain, answers.Config{Logger: s.log, Waiting: waiting})
	line.Gate.Attach(sv.answers, line.DeferDrain)
	line.Start(runCtx)
	return sv, nil
}

// The gate asks the View whether a full key waits for a consumer
// (admission.ConsumerView, found by a type assertion).
var _ admission.ConsumerView = (*answers.View)(nil)

// stop finishes the deliveries in flight (until ctx ends) and stops the
// drainers; queued jobs stay in JetStream.
func (sv *served) stop(ctx context.Context, log *slog.Logger) {
	if err := sv.Stop(ctx); err != nil {
		log.Warn("drain at shutdown", "policy", sv.Policy().Name, "err", err)
	}
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

// recordDelivery keeps the job records of delivered and failing jobs (the
// jobs package's rules), and has the operator page's series record every
// event.
func (s *Shaper) recordDelivery(policy string) func(drain.Event) {
	series := s.series.Recorder(policy)
	return func(e drain.Event) {
		series.Observe(e)
		if rec, ok := jobs.FromDelivery(policy, e); ok {
			s.jobs.Put(rec)
		}
	}
}

// failedAttempts says what delivery attempts the job records count for m
// (drain.Config.Resume): a job failing when its shaper stopped resumes
// with its attempts, so Shaper-Attempt and the retry bounds count across
// restarts and take-overs, and with its next try, so its backoff or the
// pause its downstream asked for runs on.
func (s *Shaper) failedAttempts(ctx context.Context, m *queue.Msg) drain.Resumed {
	rec, err := s.jobs.Get(ctx, m.ID)
	if err != nil || rec.Status != jobs.Queued {
		return drain.Resumed{} // no record (never failed), or one that says nothing of attempts
	}
	return rec.Resumed()
}

// recordDeferred keeps the job records of deferred jobs whose re-admission
// failed (the jobs package's rules).
func (s *Shaper) recordDeferred(policy string) func(drain.Event) {
	return func(e drain.Event) {
		if rec, ok := jobs.FromReadmission(policy, e); ok {
			s.jobs.Put(rec)
		}
	}
}
