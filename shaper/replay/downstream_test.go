package replay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain/downstream"
	"github.com/shaper-dev/shaper/shaper/replay"
	"github.com/shaper-dev/shaper/shaper/traffic"
)

func TestParseWindow(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want replay.Window
	}{
		{"0s-10s", replay.Window{0, 10 * time.Second}},
		{" 1m30s - 2m ", replay.Window{90 * time.Second, 2 * time.Minute}},
		{"500ms-1s", replay.Window{500 * time.Millisecond, time.Second}},
	} {
		got, err := replay.ParseWindow(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseWindow(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "10s", "-10s", "0s-", "x-10s", "0s-y", "10s-5s", "5s-5s", "-1s-5s"} {
		if w, err := replay.ParseWindow(in); err == nil || !strings.Contains(err.Error(), "FROM-TO") {
			t.Errorf("ParseWindow(%q) = %v, %v; want an error saying FROM-TO", in, w, err)
		}
	}
	if s := (replay.Window{0, 10 * time.Second}).String(); s != "0s-10s" {
		t.Errorf("String() = %q, want 0s-10s", s)
	}
}

// A downstream down for the first 2.5 s fails every attempt made then. At
// 1/s with a backoff of 1 s (no jitter): the job of 0 s fails at 0 s, steps
// aside, and its retry takes the slot of 1 s (a key starts with a retry's
// credit) and fails; the job of 0.5 s fails in the slot of 2 s. The
// downstream is back at 2.5 s: the first job is delivered at 3 s, the
// second at 4 s.
func TestRunDownstreamDown(t *testing.T) {
	p := policy(t, "  - {name: p, outflow: 1/s, queue: 10, retry: {backoff: 1s, max_backoff: 1s, attempts: 10}}\n")
	src := traceOf(t, []traffic.Record{at(0, "a"), at(500, "a")})
	down := replay.Downstream{Down: []replay.Window{{0, 2500 * time.Millisecond}}}
	res, err := replay.Run(context.Background(), p, src, replay.Config{Downstream: down})
	if err != nil {
		t.Fatal(err)
	}
	check(t, res, replay.Result{Submitted: 2, Accepted: 2, Delivered: 2, Failed: 3, DeepestQueue: 2, PeakKey: 2, PeakTotal: 2,
		Wait: replay.Wait{P50: 3 * time.Second, P99: 3500 * time.Millisecond, Max: 3500 * time.Millisecond}})

	// Out of attempts while the downstream is down: dead letters.
	p = policy(t, "  - {name: p, outflow: 1/s, queue: 10, retry: {backoff: 1s, max_backoff: 1s, attempts: 2}}\n")
	res, err = replay.Run(context.Background(), p, src, replay.Config{Downstream: replay.Downstream{Down: []replay.Window{{0, time.Minute}}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Delivered != 0 || res.Dead != 2 || res.Failed != 4 {
		t.Errorf("two jobs of two attempts each through a downstream down for a minute: %+v; want 4 failed attempts, 2 dead letters", res)
	}

	// A window after the trace's deliveries changes nothing.
	plain := run(t, "  - {name: p, outflow: 1/s, queue: 10}\n", []traffic.Record{at(0, "a"), at(500, "a")})
	late, err := replay.Run(context.Background(), policy(t, "  - {name: p, outflow: 1/s, queue: 10}\n"), src,
		replay.Config{Series: true, Downstream: replay.Downstream{Down: []replay.Window{{time.Hour, 2 * time.Hour}}}})
	if err != nil {
		t.Fatal(err)
	}
	plain.Series = nil
	check(t, late, plain)

	// A window no replay can use is refused.
	_, err = replay.Run(context.Background(), p, src, replay.Config{Downstream: replay.Downstream{Down: []replay.Window{{time.Second, time.Second}}}})
	if err == nil {
		t.Errorf("Run with an empty window: no error")
	}
}

// A simulated downstream whose capacity drops from 50/s to 20/s for a
// minute, under 45/s of traffic over 50 keys: a fixed 50/s total overruns
// it (deliveries time out, and the timed-out work keeps it busy), an
// adaptive total follows it.
func TestRunSimulatedDownstream(t *testing.T) {
	src := synthetic(t, traffic.Synth{Duration: 3 * time.Minute, Rate: 45, Even: true, Keys: 50, Seed: 1})
	model := &downstream.Config{Capacity: 50, Latency: 20 * time.Millisecond, Timeout: time.Second,
		Phases: []downstream.Phase{{After: time.Minute, Capacity: 20}, {After: 2 * time.Minute, Capacity: 50}}}
	run := func(yaml string) replay.Result {
		t.Helper()
		res, err := replay.Run(context.Background(), policy(t, yaml), src, replay.Config{Downstream: replay.Downstream{Model: model}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	const base = "  - {name: p, outflow: 5/s, total: 50/s, queue: 100, deliver: {timeout: 1s}"
	fixed := run(base + "}\n")
	adaptive := run(base + ", adapt: {per: policy}}\n")
	t.Logf("fixed:    delivered %d, failed %d, dead %d, rejected %d, wait p99 %v", fixed.Delivered, fixed.Failed, fixed.Dead, fixed.Rejected, fixed.Wait.P99)
	t.Logf("adaptive: delivered %d, failed %d, dead %d, rejected %d, wait p99 %v", adaptive.Delivered, adaptive.Failed, adaptive.Dead, adaptive.Rejected, adaptive.Wait.P99)
	if adaptive.Failed*5 > fixed.Failed || adaptive.Delivered < fixed.Delivered {
		t.Errorf("adaptive delivered %d with %d failed attempts, fixed %d with %d: want far fewer failures and no fewer deliveries",
			adaptive.Delivered, adaptive.Failed, fixed.Delivered, fixed.Failed)
	}
	if _, err := replay.Run(context.Background(), policy(t, base+"}\n"), src,
		replay.Config{Downstream: replay.Downstream{Model: &downstream.Config{}}}); err == nil {
		t.Errorf("Run with a downstream of no capacity = nil error, want one")
	}
}
