// Package jobtrace carries the W3C trace context of a job: read from a
// submission's headers, stored with the job in its queue, and continued by
// the spans of its delivery attempts and its dead-lettering. Parsing and
// formatting are OpenTelemetry's propagation.TraceContext.
package jobtrace

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"net/textproto"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Scope is the instrumentation scope of the shaper's spans and metrics.
const Scope = "github.com/shaper-dev/shaper"

// Propagator reads and writes the traceparent and tracestate headers.
var Propagator = propagation.TraceContext{}

// Carrier is a nats.Header as a propagation.TextMapCarrier. NATS header
// names are case-sensitive: traceparent is read and written as the W3C
// spells it.
type Carrier nats.Header

var _ propagation.TextMapCarrier = Carrier(nil)

// Get returns the first value of key.
func (c Carrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value.
func (c Carrier) Set(key, value string) { c[key] = []string{value} }

// Keys returns the header names.
func (c Carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Extract returns ctx with the remote span context stored in h, if any.
func Extract(ctx context.Context, h nats.Header) context.Context {
	return Propagator.Extract(ctx, Carrier(h))
}

// Header returns the trace headers of ctx's span context (traceparent, and
// tracestate when there is one), or an empty header when it has none.
func Header(ctx context.Context) nats.Header {
	h := make(nats.Header, 2)
	Propagator.Inject(ctx, Carrier(h))
	return h
}

// Unsampled returns ctx with the span context, not sampled, of attempt of
// job id submitted without a trace context while the shaper records no
// spans: its delivery still carries a traceparent for the consumer. The
// trace id is derived from the job's id (every attempt of a job is in one
// trace), the span id from the id and the attempt. It is made at delivery,
// not at admission, so a job stores no trace context it did not come with.
func Unsampled(ctx context.Context, id string, attempt int) context.Context {
	sum := sha256.Sum256([]byte(id))
	var sc trace.SpanContextConfig
	copy(sc.TraceID[:], sum[:16])
	sc.TraceID[15] |= 1 // never all zero
	binary.BigEndian.PutUint64(sc.SpanID[:], binary.BigEndian.Uint64(sum[16:24])^uint64(attempt)|1<<63)
	return trace.ContextWithSpanContext(ctx, trace.NewSpanContext(sc))
}

// HTTPCarrier is an http.Header as a propagation.TextMapCarrier that reads
// the W3C headers without canonicalizing their names on every request.
type HTTPCarrier http.Header

var _ propagation.TextMapCarrier = HTTPCarrier(nil)

// canonical returns the canonical form of key, at no cost for the W3C headers.
func canonical(key string) string {
	switch key {
	case "traceparent":
		return "Traceparent"
	case "tracestate":
		return "Tracestate"
	}
	return textproto.CanonicalMIMEHeaderKey(key)
}

// Get returns the first value of key.
func (c HTTPCarrier) Get(key string) string {
	if v := c[canonical(key)]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value.
func (c HTTPCarrier) Set(key, value string) { c[canonical(key)] = []string{value} }

// Keys returns the header names.
func (c HTTPCarrier) Keys() []string { return Carrier(c).Keys() }

// Child starts a span of kind named name as a child of ctx's span when that
// one is recorded, with the same tracer provider; otherwise it returns ctx
// and its span as they are, at no cost (not even the span's options).
func Child(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(Scope).Start(ctx, name, trace.WithSpanKind(kind))
}

// End ends span, marking it failed with err when err is not nil.
func End(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
