package shaper_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/shaper"
)

// While a graceful stop waits for a delivery in flight, the HTTP API
// still answers, as documented: /readyz 503 "not serving", a submission
// 503, /healthz 200; it closes only once the drain has stopped.
func TestStopAnswersWhileFinishing(t *testing.T) {
	r := start(t, "policies:\n  - {name: p, outflow: 10/s, queue: 5}\n", func(c *shaper.Config) {
		c.ShutdownTimeout = 3 * time.Second
	})
	taken := make(chan struct{}, 1)
	sub, err := r.nc.Subscribe("shaper.out.p.>", func(*nats.Msg) { taken <- struct{}{} }) // never answers
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if a := r.post(t, "p", "k", []byte("x")); a.code != 202 {
		t.Fatalf("POST = %d %v", a.code, a.body)
	}
	select {
	case <-taken:
	case <-time.After(10 * time.Second):
		t.Fatal("the job was not delivered")
	}
	stopped := make(chan struct{})
	go func() { r.Stop(); close(stopped) }()
	get := func(path string) (int, map[string]any) {
		resp, err := http.Get(r.base + path)
		if err != nil {
			return 0, map[string]any{"err": err.Error()}
		}
		defer resp.Body.Close()
		var body map[string]any
		json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	waitFor(t, "/readyz to say not serving", 2*time.Second, func() bool {
		code, body := get("/readyz")
		return code == 503 && body["status"] == "not serving"
	})
	if code, body := get("/healthz"); code != 200 {
		t.Errorf("/healthz while stopping = %d %v, want 200", code, body)
	}
	if a := r.post(t, "p", "k", []byte("y")); a.code != 503 {
		t.Errorf("POST while stopping = %d %v, want 503", a.code, a.body)
	}
	select {
	case <-stopped:
		t.Fatal("the stop did not wait for the delivery in flight")
	default:
	}
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the stop did not end within its budget")
	}
	if code, _ := get("/healthz"); code != 0 {
		t.Errorf("/healthz after the stop = %d, want the connection refused", code)
	}
}
