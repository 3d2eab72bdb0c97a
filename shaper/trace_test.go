package shaper_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

// producerTrace is a sampled W3C trace context a producer sends.
const producerTrace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// remote returns the span context of a traceparent, read by OTel's propagator.
func remote(tp string) trace.SpanContext {
	h := http.Header{}
	h.Set("traceparent", tp)
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.HeaderCarrier(h)))
}

// spansNamed waits until rec has ended at least n spans whose names start
// with prefix, and returns them.
func spansNamed(t *testing.T, rec *tracetest.SpanRecorder, prefix string, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var out []sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if strings.HasPrefix(s.Name(), prefix) {
				out = append(out, s)
			}
		}
		if len(out) >= n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spans %q ended, want %d", len(out), prefix, n)
		}
	}
}

// One trace shows a job from its submission to its delivery: the submit
// span continues the producer's traceparent; store, wait and delivery are
// its children; the delivery carries the delivery span's traceparent.
func TestTraceSubmitToDelivery(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	r := start(t, "policies:\n  - name: traced\n    outflow: 20/s\n    queue: 10\n", func(c *shaper.Config) { c.TracerProvider = tp })
	wait := collect(t, r.nc, "shaper.out.traced.>")
	a := r.post(t, "traced", "k", []byte("x"), "traceparent", producerTrace)
	if a.code != http.StatusAccepted {
		t.Fatalf("POST = %d", a.code)
	}
	msg := wait(1, 10*time.Second)[0]
	producer := remote(producerTrace)

	submit := spansNamed(t, rec, "shaper.submit", 1)[0]
	if submit.SpanContext().TraceID() != producer.TraceID() || submit.Parent().SpanID() != producer.SpanID() || !submit.Parent().IsRemote() {
		t.Errorf("submit span %v has parent %v, want a child of the producer's %v", submit.SpanContext(), submit.Parent(), producer)
	}
	if submit.SpanKind() != trace.SpanKindServer {
		t.Errorf("submit span kind %v, want server", submit.SpanKind())
	}
	for _, name := range []string{"shaper.store", "shaper.wait", "shaper.deliver"} {
		s := spansNamed(t, rec, name, 1)[0]
		if s.SpanContext().TraceID() != producer.TraceID() || s.Parent().SpanID() != submit.SpanContext().SpanID() {
			t.Errorf("%s span: trace %v parent %v, want a child of the submit span %v", name, s.SpanContext().TraceID(), s.Parent().SpanID(), submit.SpanContext().SpanID())
		}
	}
	deliver := spansNamed(t, rec, "shaper.deliver", 1)[0]
	if deliver.SpanKind() != trace.SpanKindProducer || deliver.Status().Code == codes.Error {
		t.Errorf("deliver span kind %v status %v", deliver.SpanKind(), deliver.Status())
	}
	got := remote(msg.Header.Get("traceparent"))
	if got.TraceID() != producer.TraceID() || got.SpanID() != deliver.SpanContext().SpanID() || !got.IsSampled() {
		t.Errorf("delivery traceparent %q, want the delivery span %v (sampled) for the consumer to continue", msg.Header.Get("traceparent"), deliver.SpanContext())
	}
	wantAttr(t, submit, "shaper.job.id", msg.Header.Get(client.HeaderJobID))
	wantAttr(t, deliver, "shaper.job.id", msg.Header.Get(client.HeaderJobID))
}

// A job submitted over NATS whose webhook keeps failing: every attempt is
// a span of the producer's trace, marked failed, and so is its
// dead-lettering.
func TestTraceRetriesAndDeadLetter(t *testing.T) {
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer hook.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	r := start(t, fmt.Sprintf(`
policies:
  - name: failing
    outflow: 20/s
    queue: 10
    retry: {attempts: 2, backoff: 20ms, max_backoff: 40ms}
    deliver: {webhook: %q}
`, hook.URL), func(c *shaper.Config) { c.TracerProvider = tp })
	nc, err := client.NewNATS(r.nc, client.NATSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := nc.Submit(t.Context(), "failing", "k", []byte("x"), client.WithTraceparent(producerTrace)); err != nil || res.Outcome != client.OutcomeAccepted {
		t.Fatalf("NATS submit = %+v, %v", res, err)
	}
	producer := remote(producerTrace)
	dead := spansNamed(t, rec, "shaper.dead_letter", 1)[0]
	attempts := spansNamed(t, rec, "shaper.deliver", 2)
	submit := spansNamed(t, rec, "shaper.submit", 1)[0]
	if submit.SpanKind() != trace.SpanKindConsumer || submit.Parent().SpanID() != producer.SpanID() {
		t.Errorf("NATS submit span: kind %v parent %v, want a consumer span child of the producer's", submit.SpanKind(), submit.Parent())
	}
	for _, s := range append(attempts, dead) {
		if s.SpanContext().TraceID() != producer.TraceID() || s.Parent().SpanID() != submit.SpanContext().SpanID() {
			t.Errorf("%s span is not a child of the submit span in the producer's trace", s.Name())
		}
	}
	for i, s := range attempts {
		if s.Status().Code != codes.Error {
			t.Errorf("attempt %d span status %v, want an error", i+1, s.Status())
		}
		wantAttr(t, s, "shaper.attempt", fmt.Sprint(i+1))
	}
	wantAttr(t, dead, "shaper.dead.reason", "delivery")
	if n := len(spansNamed(t, rec, "shaper.wait", 1)); n != 1 {
		t.Errorf("%d wait spans, want 1 (the wait before the first attempt)", n)
	}
}

// With tracing off no span is recorded, and a delivery carries the
// producer's traceparent as it came, or a new unsampled one.
func TestTraceparentWithoutTracing(t *testing.T) {
	r := start(t, "policies:\n  - name: plain\n    outflow: 50/s\n    queue: 10\n")
	wait := collect(t, r.nc, "shaper.out.plain.>")
	r.post(t, "plain", "a", []byte("x"), "traceparent", producerTrace)
	r.post(t, "plain", "b", []byte("x"))
	r.post(t, "plain", "c", []byte("x"), "traceparent", "00-not-a-trace-context")
	msgs := wait(3, 10*time.Second)
	byKey := map[string]*nats.Msg{}
	for _, m := range msgs {
		byKey[m.Header.Get(client.HeaderKey)] = m
	}
	if got := byKey["a"].Header.Get("traceparent"); got != producerTrace {
		t.Errorf("delivery traceparent %q, want the producer's %q", got, producerTrace)
	}
	for _, k := range []string{"b", "c"} {
		tp := byKey[k].Header.Get("traceparent")
		if sc := remote(tp); !sc.IsValid() || sc.IsSampled() || sc.TraceID() == remote(producerTrace).TraceID() {
			t.Errorf("key %s: delivery traceparent %q, want a new valid unsampled one", k, tp)
		}
	}
	if a, b := byKey["b"].Header.Get("traceparent"), byKey["c"].Header.Get("traceparent"); a == b {
		t.Errorf("two jobs share the traceparent %q", a)
	}
}

func wantAttr(t *testing.T, s sdktrace.ReadOnlySpan, key, want string) {
	t.Helper()
	i := slices.IndexFunc(s.Attributes(), func(kv attribute.KeyValue) bool { return string(kv.Key) == key })
	if i < 0 {
		t.Errorf("%s span lacks attribute %s", s.Name(), key)
		return
	}
	if got := s.Attributes()[i].Value.String(); got != want {
		t.Errorf("%s span: %s = %q, want %q", s.Name(), key, got, want)
	}
}
