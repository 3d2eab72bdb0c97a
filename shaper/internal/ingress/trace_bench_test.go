package ingress

import (
	"context"
	"net/http"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/shaper-dev/shaper/shaper/internal/admission"
	"github.com/shaper-dev/shaper/shaper/internal/jobtrace"
)

// BenchmarkTelemetryOff is what a submission's telemetry costs with tracing
// off: reading its trace context (none, or the producer's), the job's
// trace headers, and the admission latency histogram.
func BenchmarkTelemetryOff(b *testing.B) {
	tel := newTelemetry(Config{Meter: sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())).Meter("b")})
	for _, tc := range []struct{ name, traceparent string }{
		{"no-traceparent", ""},
		{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := http.Header{}
			if tc.traceparent != "" {
				h.Set("traceparent", tc.traceparent)
			}
			a := answer{outcome: admission.Accepted, Code: 202}
			b.ReportAllocs()
			for b.Loop() {
				sub := submission{policy: "p", key: "k"}
				_, span := tel.begin(context.Background(), jobtrace.HTTPCarrier(h), &sub, transportHTTP)
				tel.end(span, a, true)
			}
		})
	}
}
