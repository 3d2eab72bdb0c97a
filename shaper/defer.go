package shaper

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nuid"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
)

// Deferred jobs of policy p wait in their own stream, SHAPER_DEFER_<p> on
// shaper.deferred.<p>.<key token>: message schedules cannot live in the
// DiscardNew queue stream, and a separate per-key FIFO keeps deferred jobs
// of a key in submission order. A second Drainer "delivers" them back into
// the policy's queue (readmitSink), paced at the policy's outflow rate, only
// when the key has room, so re-admission can never push a key past its
// queue size or rate, and one key's retries cannot crowd out other keys.
const (
	deferSubjectRoot  = "shaper.deferred"
	deferStreamPrefix = "SHAPER_DEFER_"
	// HeaderDeferrals counts the failed re-admission attempts of a job that
	// was deferred; it is delivered with the job.
	HeaderDeferrals = "Shaper-Deferrals"
	deferWorkers    = 8
)

// deferredSize is how many deferred jobs a key may hold: ten queues' worth,
// at least 1,000. Past it a defer policy answers 429 without keeping the job.
func deferredSize(p policies.Policy) int {
	return min(max(10*p.Queue, 1000), 1_000_000)
}

// openDeferral opens the deferred stream of p and its re-admitting drainer.
func (s *Shaper) openDeferral(ctx context.Context, rt *runtime, p policies.Policy) error {
	q, err := queue.Open(ctx, s.js, p.Name, deferredSize(p), queue.Config{
		Replicas:     s.cfg.Replicas,
		MaxPayload:   s.cfg.MaxPayload,
		Timeout:      s.cfg.Timeout,
		SubjectRoot:  deferSubjectRoot,
		StreamPrefix: deferStreamPrefix,
		Logger:       s.log,
	})
	if err != nil {
		return fmt.Errorf("deferred stream: %w", err)
	}
	rt.deferQ = q
	rt.deferD = drain.New(q, &readmitSink{s: s, rt: rt}, paceOf(p), drain.Config{
		Workers:     deferWorkers,
		Logger:      s.log.With("path", "deferred"),
		DeadLetter:  s.deadLetterFunc(rt, "deferred"),
		FailReason:  drain.ReasonAttempts,
		CountPauses: true,
		OnDeliver:   s.recordDeferred(rt),
		Passive:     true, // until this shaper holds the policy's lease
	})
	return nil
}

// readmitSink puts a deferred job back into its key's queue.
type readmitSink struct {
	s  *Shaper
	rt *runtime
}

var _ drain.Sink = (*readmitSink)(nil)

// Deliver implements drain.Sink: it gives up past the deadline, waits
// (without counting an attempt) while the key's queue is known to be full,
// and otherwise admits the job with its original id, so a re-admission
// repeated after a crash is stored once.
func (r *readmitSink) Deliver(ctx context.Context, d *drain.Delivery) error {
	p := r.rt.pol.Load()
	m := d.Msg
	now := time.Now()
	if dl := p.Retry.Deadline; dl > 0 && now.After(m.EnqueuedAt.Add(dl)) {
		return &drain.GiveUpError{Reason: drain.ReasonDeadline, Cause: fmt.Sprintf("deferred since %s, deadline %s", m.EnqueuedAt.UTC().Format(time.RFC3339), dl)}
	}
	st := r.rt.d.Key(m.Token, now)
	if st.Queued >= int64(p.Queue) {
		return &drain.RetryAfterError{After: max(st.RoomIn, time.Millisecond), Cause: "key's queue is full", NotAttempted: true}
	}
	h := queue.JobHeader(m.Header)
	h.Set(HeaderDeferrals, strconv.Itoa(m.Attempt-1))
	_, err := r.rt.q.Admit(ctx, queue.Job{ID: m.ID, Key: m.Key, Payload: m.Payload, EnqueuedAt: m.EnqueuedAt, Header: h})
	switch {
	case err == nil:
		r.rt.counter.readmitted.Add(1)
		r.s.jobs.put(jobRecord{ID: m.ID, Policy: p.Name, Key: m.Key, Status: statusQueued, Deferrals: m.Attempt - 1})
		return nil
	case errors.Is(err, queue.ErrFull):
		st = r.rt.d.Key(m.Token, time.Now())
		return &drain.RetryAfterError{After: max(st.RoomIn, time.Millisecond), Cause: "key's queue is full"}
	default:
		return err
	}
}

// deferJob keeps a job its key's full queue refused, and answers 429 with
// the job id and when it is expected to run.
func (s *Shaper) deferJob(ctx context.Context, rt *runtime, p *policies.Policy, token string, job queue.Job, now time.Time) outcome {
	// A deferred job keeps its id through re-admission: it is made here, the
	// Idempotency-Key's (so a retry is stored once) or a new one.
	job.ID = cmp.Or(job.Dedupe, nuid.Next())
	o := outcome{ID: job.ID, Policy: p.Name, Key: job.Key}
	done := rt.deferring(token)
	rec, err := rt.deferQ.Admit(ctx, job)
	done(rec.Seq) // 0 when nothing was stored; a duplicate's is the first job's
	switch {
	case err == nil:
	case errors.Is(err, queue.ErrFull):
		rt.counter.rejected.Add(1)
		o = s.full(rt, p, token, o, now)
		o.Error += "; its deferred jobs are at their limit too (" + strconv.Itoa(deferredSize(*p)) + "), so this one is not kept"
		return o
	default:
		rt.counter.unavailable.Add(1)
		return unavailable("queue backend", err)
	}
	if rec.Duplicate {
		rt.counter.duplicates.Add(1)
	} else {
		rt.counter.deferred.Add(1)
	}
	main := rt.d.Key(token, now)
	def := rt.deferD.Key(token, now)
	ahead := def.Queued
	if rec.Seq > def.Seen {
		ahead++ // this job, not yet seen by the deferred drainer
	}
	iv := p.Outflow.Interval()
	eta := main.NextIn + time.Duration(main.Waiting+ahead-1)*iv
	eta = max(eta, main.RoomIn)
	s.jobs.put(jobRecord{ID: job.ID, Policy: p.Name, Key: job.Key, Status: statusDeferred, NextTry: now.Add(eta)})
	o.Status, o.Code, o.Deferred, o.Duplicate = statusDeferred, http.StatusTooManyRequests, true, rec.Duplicate
	o.Queued = max(main.Queued, int64(p.Queue))
	o.RetryAfterMs = max(ceilMs(eta), 1)
	o.ETAms = o.RetryAfterMs
	o.Error = "queue of key " + quote(job.Key) + " is full: the job is deferred and will be re-admitted when there is room; do not resubmit"
	o.limits = s.full(rt, p, token, outcome{}, now).limits
	o.limits.RetryAfter = eta
	o.window = time.Duration(p.Queue) * iv
	return o
}

// recordDeferred keeps the job records of deferred jobs up to date.
func (s *Shaper) recordDeferred(rt *runtime) func(drain.Event) {
	return func(e drain.Event) {
		var ra *drain.RetryAfterError
		if e.Err != nil && !(errors.As(e.Err, &ra) && ra.NotAttempted) {
			s.jobs.put(jobRecord{ID: e.ID, Policy: rt.pol.Load().Name, Key: e.Key, Status: statusDeferred, Deferrals: e.Attempt - 1, NextTry: e.RetryAt, LastError: e.Err.Error()})
		}
	}
}
