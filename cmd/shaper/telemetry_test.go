package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/freeport"

	"github.com/nats-io/nats.go"
	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/shaper-dev/shaper/shaper/client"
)

// otlpReceiver is an OTLP/HTTP receiver (protobuf) keeping every span and
// the names of the metrics it is sent.
type otlpReceiver struct {
	mu      sync.Mutex
	spans   []*tracepb.Span
	metrics map[string]bool
}

func (o *otlpReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch r.URL.Path {
	case "/v1/traces":
		var req coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				o.spans = append(o.spans, ss.GetSpans()...)
			}
		}
		b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(b)
	case "/v1/metrics":
		var req colmetrics.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		for _, rm := range req.GetResourceMetrics() {
			for _, sm := range rm.GetScopeMetrics() {
				for _, m := range sm.GetMetrics() {
					o.metrics[m.GetName()] = true
				}
			}
		}
		b, _ := proto.Marshal(&colmetrics.ExportMetricsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(b)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	p, err := freeport.One()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(p)
}

// serveCLI runs shaper serve with args until the test ends (or stop is
// called) and waits for it to answer /readyz.
func serveCLI(t *testing.T, httpAddr string, args ...string) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out, errOut bytes.Buffer
	go func() {
		done <- runWith(ctx, &out, &errOut, append([]string{"shaper", "serve", "--http", httpAddr}, args...))
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + httpAddr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-done:
			cancel()
			t.Fatalf("serve ended before ready: %v\n%s", err, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("serve not ready after 20s:\n%s", errOut.String())
		}
	}
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				t.Error("serve did not stop 30s after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// serveOrders runs shaper serve with one policy, orders, and a consumer
// confirming its deliveries; it returns an API client, the deliveries and
// the stop of serve.
func serveOrders(t *testing.T) (*client.Client, <-chan *nats.Msg, func() error) {
	t.Helper()
	policies := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(policies, []byte("policies:\n  - name: orders\n    outflow: 20/s\n    queue: 10\n"), 0o644)
	httpAddr, natsAddr := freeAddr(t), freeAddr(t)
	stop := serveCLI(t, httpAddr, "--policies", policies, "--nats-listen", natsAddr, "--data", t.TempDir())
	nc, err := nats.Connect("nats://" + natsAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	delivered := make(chan *nats.Msg, 1)
	nc.Subscribe("shaper.out.orders.>", func(m *nats.Msg) {
		m.Respond(nil) // a consumer confirming the delivery
		delivered <- m
	})
	nc.Flush()
	return newAPI(t, httpAddr), delivered, stop
}

// producerTrace is the trace id of the producer's traceparent that
// deliverTraced submits with.
const producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"

// deliverTraced runs shaper serve exporting to an OTLP receiver (the
// OTEL_* variables env besides its endpoint), submits one job of orders
// with the producer's traceparent, and stops serve once it is delivered:
// what serve exported is in the receiver.
func deliverTraced(t *testing.T, env map[string]string) (*otlpReceiver, *nats.Msg) {
	t.Helper()
	recv := &otlpReceiver{metrics: map[string]bool{}}
	otlp := httptest.NewServer(recv)
	t.Cleanup(otlp.Close)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL)
	for k, v := range env {
		t.Setenv(k, v)
	}
	api, delivered, stop := serveOrders(t)
	if res, err := api.Submit(t.Context(), "orders", "acme", []byte("hi"), client.WithTraceparent("00-"+producerTrace+"-00f067aa0ba902b7-01")); err != nil || res.Outcome != client.OutcomeAccepted {
		t.Fatalf("submit = %+v, %v", res, err)
	}
	var msg *nats.Msg
	select {
	case msg = <-delivered:
	case <-time.After(10 * time.Second):
		t.Fatal("job not delivered")
	}
	if err := stop(); err != nil { // flushes what is left to export
		t.Fatalf("serve = %v", err)
	}
	return recv, msg
}

// With an OTLP endpoint in the environment, serve exports one trace per
// job: submit, store and delivery spans under the producer's trace id; and
// its metrics.
func TestServeExportsOTLP(t *testing.T) {
	recv, msg := deliverTraced(t, map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_METRIC_EXPORT_INTERVAL": "200"})
	recv.mu.Lock()
	defer recv.mu.Unlock()
	names := map[string]string{} // span name → trace id
	for _, s := range recv.spans {
		names[s.GetName()] = hex.EncodeToString(s.GetTraceId())
	}
	for _, name := range []string{"shaper.submit", "shaper.store", "shaper.wait", "shaper.deliver orders"} {
		if got, ok := names[name]; !ok || got != producerTrace {
			t.Errorf("span %q: trace %q (exported: %v), want one in the producer's trace %s", name, got, names, producerTrace)
		}
	}
	if tp := msg.Header.Get("traceparent"); len(tp) != 55 || tp[3:35] != producerTrace {
		t.Errorf("delivery traceparent %q, want the producer's trace", tp)
	}
	for _, name := range []string{"shaper.queue.duration", "shaper.drain.lateness", "shaper.jobs.admitted"} {
		if !recv.metrics[name] {
			t.Errorf("metric %s not exported over OTLP (got %v)", name, recv.metrics)
		}
	}
}

// Spans and pushed metrics are off unless the OTEL_* variables ask for them.
func TestTelemetryFromEnv(t *testing.T) {
	for _, v := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
		"OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_SDK_DISABLED"} {
		t.Setenv(v, "")
	}
	log := slog.New(slog.DiscardHandler)
	for _, c := range []struct {
		env            map[string]string
		spans, metrics bool
	}{
		{nil, false, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true, false},
		{map[string]string{"OTEL_METRICS_EXPORTER": "prometheus"}, false, false}, // that is /metrics
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false, false},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		tel, err := telemetryFromEnv(t.Context(), log)
		if err != nil {
			t.Fatalf("%v: %v", c.env, err)
		}
		if got := tel.tracer != nil; got != c.spans {
			t.Errorf("%v: spans %v, want %v", c.env, got, c.spans)
		}
		if got := len(tel.readers) > 0; got != c.metrics {
			t.Errorf("%v: pushed metrics %v, want %v", c.env, got, c.metrics)
		}
		tel.shutdown(t.Context())
		for _, r := range tel.readers {
			r.Shutdown(t.Context())
		}
		for k := range c.env {
			t.Setenv(k, "")
		}
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	if _, err := telemetryFromEnv(t.Context(), log); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Errorf("an exporter that does not exist = %v, want an error naming OTEL_TRACES_EXPORTER", err)
	}
}

// OTEL_TRACES_SAMPLER decides what is sampled: always_off records nothing,
// and the delivery's traceparent says so.
func TestServeSamplerFromEnv(t *testing.T) {
	recv, msg := deliverTraced(t, map[string]string{"OTEL_METRICS_EXPORTER": "none", "OTEL_TRACES_SAMPLER": "always_off"})
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.spans) != 0 || len(recv.metrics) != 0 {
		t.Errorf("exported %d spans and %d metrics, want none", len(recv.spans), len(recv.metrics))
	}
	if tp := msg.Header.Get("traceparent"); len(tp) != 55 || tp[3:35] != producerTrace || tp[53:] != "00" {
		t.Errorf("delivery traceparent %q, want the producer's trace, not sampled", tp)
	}
}
