package shaper

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/jobtrace"
)

// observedSink is a policy's sink with telemetry: each delivery attempt is
// timed and, when tracing is on, gets a span continuing the job's trace
// (the submit span's context, stored with the job); the delivery carries
// that span's traceparent, for the consumer to continue. The first attempt
// also records the job's wait (enqueued → first attempt) as a span.
type observedSink struct {
	next   drain.Sink
	m      *metrics
	tracer trace.Tracer // nil: no spans
	policy string

	ok, failed, waiting metric.MeasurementOption
}

var _ drain.Sink = (*observedSink)(nil)

// observe wraps the sink of policy with telemetry.
func (s *Shaper) observe(policy string, sink drain.Sink) drain.Sink {
	outcome := func(o string) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(attribute.String("policy", policy), attribute.String("outcome", o)))
	}
	return &observedSink{next: sink, m: s.metrics, tracer: s.tracer, policy: policy,
		ok: outcome("ok"), failed: outcome("failed"), waiting: outcome("waiting")}
}

// Deliver implements drain.Sink.
func (o *observedSink) Deliver(ctx context.Context, d *drain.Delivery) error {
	start := time.Now()
	var span trace.Span
	var job context.Context // the job's stored trace context
	if o.tracer != nil {
		job = jobtrace.Extract(ctx, d.Msg.Header)
		ctx, span = o.tracer.Start(job, "shaper.deliver "+o.policy, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithTimestamp(start), trace.WithAttributes(o.attributes(d.Msg)...))
		d = withTrace(ctx, d) // the consumer continues the delivery's span
	} else if !trace.SpanContextFromContext(jobtrace.Extract(ctx, d.Msg.Header)).IsValid() {
		// A job submitted without a trace context: its delivery carries a
		// new one, not sampled, for the consumer.
		d = withTrace(jobtrace.Unsampled(ctx, d.Msg.ID, d.Msg.Attempt), d)
	}
	err := o.next.Deliver(ctx, d)
	end := time.Now()
	var pause *drain.RetryAfterError
	errors.As(err, &pause)
	notAttempted := !drain.Attempted(err) // no consumer yet: the job waits
	switch {
	case err == nil:
		o.m.delivery.Record(ctx, end.Sub(start).Seconds(), o.ok)
	case notAttempted:
		o.m.delivery.Record(ctx, end.Sub(start).Seconds(), o.waiting)
	default:
		o.m.delivery.Record(ctx, end.Sub(start).Seconds(), o.failed)
	}
	if span == nil || !span.IsRecording() {
		return err
	}
	if m := d.Msg; m.Attempt <= 1 && !notAttempted && !m.EnqueuedAt.IsZero() && m.EnqueuedAt.Before(start) {
		// The job's wait, from its enqueuing to its first attempt.
		_, wait := o.tracer.Start(job, "shaper.wait", trace.WithTimestamp(m.EnqueuedAt), trace.WithAttributes(o.attributes(m)...))
		wait.End(trace.WithTimestamp(start))
	}
	if pause != nil {
		span.SetAttributes(attribute.Float64("shaper.retry_after_s", pause.After.Seconds()), attribute.Bool("shaper.not_attempted", pause.NotAttempted))
	}
	failure := err
	if notAttempted {
		span.SetAttributes(attribute.String("shaper.waiting", pause.Cause))
		failure = nil // not a failure of the delivery
	}
	jobtrace.End(span, failure)
	return err
}

// withTrace returns a copy of d whose job carries the trace context of
// ctx (the drainer keeps d's job as it is).
func withTrace(ctx context.Context, d *drain.Delivery) *drain.Delivery {
	m := *d.Msg
	m.Header = queue.JobHeader(d.Msg.Header)
	jobtrace.Propagator.Inject(ctx, jobtrace.Carrier(m.Header))
	copied := *d
	copied.Msg = &m
	return &copied
}

// attributes are the span attributes of a delivery of m.
func (o *observedSink) attributes(m *queue.Msg) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("shaper.policy", o.policy),
		attribute.String("shaper.key", m.Key),
		attribute.String("shaper.job.id", m.ID),
		attribute.Int("shaper.attempt", m.Attempt),
	}
}

// onDeliver wraps a drainer's OnDeliver with the histograms read from its
// events, as the operator page reads them (ui.Recorder.Observe): how late
// each delivery attempt started after its slot, and how long each
// delivered job waited in its queue (the start of its delivery −
// enqueued). A pause without an attempt is neither.
func (s *Shaper) onDeliver(policy string, next func(drain.Event)) func(drain.Event) {
	opt := s.metrics.policy(policy)
	return func(e drain.Event) {
		if e.Attempted {
			s.metrics.lateness.Record(context.Background(), max(e.Started.Sub(e.Scheduled), 0).Seconds(), opt)
			if e.Err == nil && !e.Enqueued.IsZero() {
				s.metrics.queueTime.Record(context.Background(), e.Started.Sub(e.Enqueued).Seconds(), opt)
			}
		}
		next(e)
	}
}
