package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
)

// A store filled to an external server's own limit, which no client sees
// (no account limit: nothing is kept for the drain), refuses the drain's
// lease renewals: `shaper status` then says the drain delivers nothing,
// not that a consumer subscribing would get the jobs, and why it is not
// ready.
func TestStatusOfAStoppedDrain(t *testing.T) {
	ns := testenv.NATSWith(t, func(o *server.Options) { o.JetStreamMaxStore = 2 << 20 })
	s := testenv.Shaper(t, shaper.Config{NATSURL: ns.ClientURL(), LeaseTTL: time.Second, Policies: testenv.Policies(t,
		"policies:\n  - {name: p, outflow: 1/s, queue: 1000}\n")})
	api := newAPI(t, s.HTTPAddr())
	payload := bytes.Repeat([]byte("x"), 64<<10)
	for i := 0; ; i++ {
		if _, err := api.Submit(t.Context(), "p", "k", payload); err != nil {
			break // 503: the store is full
		}
		if i > 100 {
			t.Fatal("101 jobs of 64 KiB stored in a 2 MiB store")
		}
	}
	const want = "waiting for a consumer: p since "
	const stopped = "its drain delivers nothing until JetStream stores its lease renewals again (see not ready below): a consumer subscribing now gets nothing yet"
	var out string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		out, _, _ = runCLI(t, "status", "--http", s.HTTPAddr())
		if strings.Contains(out, stopped) && strings.Contains(out, "not ready: JetStream stores nothing: its storage is full") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of a drain stopped by a full store:\n%s\nwant %q…%q and why it is not ready", out, want, stopped)
		}
	}
	if strings.Contains(out, "its jobs stay queued until one subscribes") {
		t.Errorf("status of a stopped drain still says a consumer would get its jobs:\n%s", out)
	}
}
