package ingress

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

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

// transport is how a submission came.
type transport uint8

// The transports of a submission.
const (
	transportHTTP transport = iota
	transportNATS
	transportReplay // a dead letter submitted again
)

var transports = [...]string{transportHTTP: "http", transportNATS: "nats", transportReplay: "replay"}

// String returns the name of tr, as metrics and spans show it.
func (tr transport) String() string { return transports[tr] }

// latencySeries are the attribute sets {policy, outcome, transport} of one
// policy, by outcome and transport.
// (Each a slice of one option, made once: a measurement allocates nothing.)
type latencySeries [admission.Invalid + 1][len(transports)][]metric.RecordOption

// options returns the attribute set of policy, outcome and transport.
func (t *telemetry) options(policy string, outcome admission.Outcome, tr transport) []metric.RecordOption {
	if m := t.series.Load(); m != nil {
		if s := (*m)[policy]; s != nil {
			return s[outcome][tr]
		}
	}
	return t.addSeries(policy)[outcome][tr]
}

// addSeries makes the attribute sets of policy, unless another goroutine
// just did, and returns them.
func (t *telemetry) addSeries(policy string) *latencySeries {
	t.mu.Lock()
	defer t.mu.Unlock()
	next := map[string]*latencySeries{}
	if m := t.series.Load(); m != nil {
		if s := (*m)[policy]; s != nil {
			return s
		}
		maps.Copy(next, *m)
	}
	s := new(latencySeries)
	for o := range s {
		for tr, name := range transports {
			s[o][tr] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("policy", policy),
				attribute.String("outcome", admission.Outcome(o).String()), attribute.String("transport", name)))}
		}
	}
	next[policy] = s
	t.series.Store(&next)
	return s
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
// non-recording one when tracing is off), when it arrived (the time its
// gate decides at), its policy and its transport.
type submitSpan struct {
	span      trace.Span
	start     time.Time
	policy    string
	transport transport
}

// begin starts the telemetry of sub, whose headers are in carrier: a span
// continuing the producer's W3C trace context (when tracing is on), and
// the trace headers its job is stored with: the submit span's, or with
// tracing off the producer's (none when it sent none: its deliveries get
// a new unsampled one, made then).
func (t *telemetry) begin(ctx context.Context, carrier propagation.TextMapCarrier, sub *submission, tr transport) (context.Context, submitSpan) {
	start := time.Now()
	ctx = jobtrace.Propagator.Extract(ctx, carrier)
	span := trace.SpanFromContext(ctx)
	if t.tracer != nil {
		kind := trace.SpanKindServer
		if tr == transportNATS {
			kind = trace.SpanKindConsumer
		}
		ctx, span = t.tracer.Start(ctx, "shaper.submit", trace.WithSpanKind(kind), trace.WithTimestamp(start),
			trace.WithAttributes(attribute.String("shaper.policy", sub.policy), attribute.String("shaper.key", sub.key),
				attribute.String("shaper.transport", tr.String())))
	}
	if span.SpanContext().IsValid() {
		sub.trace = jobtrace.Header(ctx)
	}
	return ctx, submitSpan{span: span, start: start, policy: sub.policy, transport: tr}
}

// end records the answer a to the submission (known: a gate decided) and
// ends its span.
func (t *telemetry) end(s submitSpan, a answer, known bool) {
	if known {
		t.latency.Record(context.Background(), time.Since(s.start).Seconds(), t.options(s.policy, a.outcome, s.transport)...)
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
