package shaper_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/shaper"
)

// A lone shaper stopped gracefully and started again after longer than its
// lease TTL keeps each key's pace: what it left for the next holder of its
// partitions outlives the lease, so the key's next job comes one interval
// after its last, as its eta_ms said — not at once.
func TestRestartAfterTheLeaseKeepsThePace(t *testing.T) {
	const yaml = "policies:\n  - name: p\n    outflow: 15/m\n    queue: 10\n" // a job every 4 s
	dir := t.TempDir()
	cfg := func(c *shaper.Config) { c.DataDir, c.LeaseTTL = dir, time.Second }
	first := start(t, yaml, cfg)
	delivered := make(chan time.Time, 4)
	sub, err := first.nc.Subscribe("shaper.out.p.>", func(m *nats.Msg) { m.Respond(nil); delivered <- time.Now() })
	if err != nil {
		t.Fatal(err)
	}
	first.nc.Flush()
	var eta float64
	for i := range 2 {
		a := first.post(t, "p", "k", []byte{byte('a' + i)})
		if a.code != 202 {
			t.Fatalf("POST #%d = %d %v", i, a.code, a.body)
		}
		eta, _ = a.body["eta_ms"].(float64)
	}
	var firstAt time.Time
	select {
	case firstAt = <-delivered:
	case <-time.After(10 * time.Second):
		t.Fatal("no first delivery")
	}
	sub.Unsubscribe()
	first.Stop()
	time.Sleep(2 * time.Second) // twice the lease TTL: the lease, and any entry with its TTL, expired

	second := start(t, yaml, cfg)
	if _, err := second.nc.Subscribe("shaper.out.p.>", func(m *nats.Msg) { m.Respond(nil); delivered <- time.Now() }); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-delivered:
		gap := at.Sub(firstAt)
		t.Logf("the second job came %v after the first (eta_ms %v, interval 4 s)", gap.Round(time.Millisecond), eta)
		if gap < 4*time.Second-50*time.Millisecond {
			t.Errorf("after a restart longer than the lease TTL the key's second job came %v after its first, want at least its 4 s interval (eta_ms was %v)", gap, eta)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no delivery after the restart")
	}
}
