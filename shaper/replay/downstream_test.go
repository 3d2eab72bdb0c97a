package replay_test

import (
	"context"
	"strings"
	"testing"
	"time"

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
