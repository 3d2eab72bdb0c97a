package ingress

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
	"github.com/shaper-dev/shaper/shaper/internal/jobtrace"
)

// admissionBuckets are the bucket bounds of the admission latency
// histogram, in seconds: from 50 µs to the 2 s admission timeout.
var admissionBuckets = []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}

// telemetry is the ingress's instruments: the admission latency histogram
// and, when tracing is on, the tracer of the submit spans.
type telemetry struct {
	tracer  trace.Tracer // nil: no spans recorded
	latency metric.Float64Histogram

	// series holds the attribute sets of the latency histogram per policy,
	// a map replaced whole when a policy is added (read without a lock).
	series atomic.Pointer[map[string]*latencySeries]
	mu     sync.Mutex // serializes the additions
}

// The transports of a submission.
const (
	transportHTTP   = "http"
	transportNATS   = "nats"
	transportReplay = "replay" // a dead letter submitted again
)

var transports = [...]string{transportHTTP, transportNATS, transportReplay}

// latencySeries are the attribute sets {policy, outcome, transport} of one
// policy, by outcome and transport.
// (Each a slice of one option, made once: a measurement allocates nothing.)
type latencySeries [admission.Invalid + 1][len(transports)][]metric.RecordOption

// options returns the attribute set of policy, outcome and transport.
func (t *telemetry) options(policy string, outcome admission.Outcome, transport string) []metric.RecordOption {
	tr := slices.Index(transports[:], transport)
	if m := t.series.Load(); m != nil {
		if s := (*m)[policy]; s != nil && int(outcome) < len(s) {
			return s[outcome][tr]
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	next := map[string]*latencySeries{}
	if m := t.series.Load(); m != nil {
		maps.Copy(next, *m)
	}
	s := next[policy]
	if s == nil {
		s = new(latencySeries)
		for o := range s {
			for i, name := range transports {
				s[o][i] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("policy", policy),
					attribute.String("outcome", admission.Outcome(o).String()), attribute.String("transport", name)))}
			}
		}
		next[policy] = s
		t.series.Store(&next)
	}
	return s[min(int(outcome), len(s)-1)][tr]
}

func newTelemetry(cfg Config) *telemetry {
	m := cfg.Meter
	if m == nil {
		m = noop.NewMeterProvider().Meter(jobtrace.Scope)
	}
	latency, err := m.Float64Histogram("shaper.admission.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Time from a submission received (its payload read) to its answer, by policy, outcome and transport (http, nats, replay)."),
		metric.WithExplicitBucketBoundaries(admissionBuckets...))
	if err != nil {
		latency, _ = noop.NewMeterProvider().Meter(jobtrace.Scope).Float64Histogram("shaper.admission.duration")
	}
	return &telemetry{tracer: cfg.Tracer, latency: latency}
}

// submitSpan is the telemetry of one submission: its span (the producer's
// non-recording one when tracing is off) and when it arrived.
type submitSpan struct {
	span      trace.Span
	start     time.Time
	transport string
}

// begin starts the telemetry of sub, whose headers are in carrier: a span
// continuing the producer's W3C trace context (when tracing is on), and
// the trace headers its job is stored with: the submit span's, or with
// tracing off the producer's (none when it sent none: its deliveries get
// a new unsampled one, made then).
func (t *telemetry) begin(ctx context.Context, carrier propagation.TextMapCarrier, sub *submission, transport string) (context.Context, submitSpan) {
	start := time.Now()
	ctx = jobtrace.Propagator.Extract(ctx, carrier)
	span := trace.SpanFromContext(ctx)
	if t.tracer != nil {
		kind := trace.SpanKindServer
		if transport == transportNATS {
			kind = trace.SpanKindConsumer
		}
		ctx, span = t.tracer.Start(ctx, "shaper.submit", trace.WithSpanKind(kind), trace.WithTimestamp(start),
			trace.WithAttributes(attribute.String("shaper.policy", sub.policy), attribute.String("shaper.key", sub.key),
				attribute.String("shaper.transport", transport)))
	}
	if span.SpanContext().IsValid() {
		sub.trace = jobtrace.Header(ctx)
	}
	return ctx, submitSpan{span: span, start: start, transport: transport}
}

// end records the answer a to the submission of policy (known: a gate
// decided) and ends its span.
func (t *telemetry) end(s submitSpan, policy string, a answer, known bool) {
	if known {
		t.latency.Record(context.Background(), time.Since(s.start).Seconds(), t.options(policy, a.outcome, s.transport)...)
	}
	if !s.span.IsRecording() {
		return
	}
	s.span.SetAttributes(attribute.String("shaper.outcome", a.outcome.String()), attribute.Int("shaper.code", a.Code))
	if a.ID != "" {
		s.span.SetAttributes(attribute.String("shaper.job.id", a.ID))
	}
	if a.Code >= 500 {
		s.span.SetStatus(codes.Error, a.Error)
	}
	s.span.End()
}

// storeError is the error a store span reports: a full queue is an answer,
// not a failure of the store.
func storeError(err error) error {
	if errors.Is(err, queue.ErrFull) {
		return nil
	}
	return err
}
