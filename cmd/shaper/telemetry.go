package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/shaper-dev/shaper/internal/logevery"
)

// telemetry is what the standard OTEL_* environment variables ask of
// serve, besides /metrics (always served):
//
//   - spans, only when an exporter is named (OTEL_TRACES_EXPORTER=otlp or
//     console) or an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT,
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); sampled as OTEL_TRACES_SAMPLER
//     says (default parentbased_always_on);
//   - metrics pushed to an exporter, likewise (OTEL_METRICS_EXPORTER=otlp or
//     console, or OTEL_EXPORTER_OTLP_ENDPOINT,
//     OTEL_EXPORTER_OTLP_METRICS_ENDPOINT); "prometheus" is /metrics itself.
//
// OTEL_SDK_DISABLED=true turns both off. The exporters read their own
// variables (OTEL_EXPORTER_OTLP_PROTOCOL, _HEADERS, …); OTEL_SERVICE_NAME
// and OTEL_RESOURCE_ATTRIBUTES describe the shaper (default service.name
// "shaper").
type telemetry struct {
	tracer   *sdktrace.TracerProvider // nil: no spans
	readers  []sdkmetric.Reader
	resource *resource.Resource
	exports  []string // what is exported where, for the log
}

// telemetryFromEnv builds the telemetry the environment asks for.
func telemetryFromEnv(ctx context.Context, log *slog.Logger) (*telemetry, error) {
	// The exporters report failures (an unreachable collector) through
	// OTel's global handler: into the structured log with everything else.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("opentelemetry", "err", err) }))
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("shaper")),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
		resource.WithTelemetrySDK(),
		resource.WithHost(),
	)
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	t := &telemetry{resource: res}
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return t, nil
	}
	if exporter, on := wanted("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); on {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTEL_TRACES_EXPORTER: %w", err)
		}
		t.tracer = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.exports = append(t.exports, "spans to "+exporter)
	}
	if exporter, on := wanted("OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"); on && exporter != "prometheus" {
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			t.shutdown(ctx)
			return nil, fmt.Errorf("OTEL_METRICS_EXPORTER: %w", err)
		}
		t.readers = append(t.readers, r)
		t.exports = append(t.exports, "metrics to "+exporter)
	}
	return t, nil
}

// wanted reports whether the signal whose exporter variable is kind should
// be exported, and by which exporter: the one named, or otlp when only an
// OTLP endpoint (the common one, or endpoint: the signal's own) is set.
func wanted(kind, endpoint string) (string, bool) {
	switch exporter := strings.TrimSpace(os.Getenv(kind)); exporter {
	case "none":
		return "", false
	case "":
		return "otlp", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv(endpoint) != ""
	default:
		return exporter, true
	}
}

// shutdown flushes what is left to export (spans still batched).
func (t *telemetry) shutdown(ctx context.Context) error {
	if t.tracer == nil {
		return nil
	}
	return t.tracer.Shutdown(ctx)
}

// redisLog sends go-redis's own messages (a pool that cannot dial, say)
// to the structured log instead of the standard logger, at most one per
// redisLogEvery: a dead Redis makes one per attempt, and the limiter's own
// lines already say when Redis fails and when it answers again.
type redisLog struct {
	log   *slog.Logger
	every logevery.Limiter
}

const redisLogEvery = 10 * time.Second

func (r *redisLog) Printf(_ context.Context, format string, v ...any) {
	r.printf(time.Now(), format, v...)
}

func (r *redisLog) printf(now time.Time, format string, v ...any) {
	ok, left := r.every.Allow(now, redisLogEvery)
	if !ok {
		return
	}
	args := []any{"detail", fmt.Sprintf(format, v...)}
	if left > 0 {
		args = append(args, "left_out", left)
	}
	r.log.Warn("redis client", args...)
}
