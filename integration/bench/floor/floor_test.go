package main

import (
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchtest"
)

// TestFloorSmoke runs the benchmark end to end, small (2,000 jobs over 50
// keys, paced for 2 s), and checks that its table parses and that the
// floor, the floor paced, the unpaced shaper, the paced shaper and the bare
// paced hand-off (on the floor's server and embedded) each have a non-zero
// throughput and CPU per delivery. The figures themselves are not judged.
func TestFloorSmoke(t *testing.T) {
	out := benchtest.Smoke(t, "nats-server and two shapers", 4*time.Minute,
		"-jobs", "2000", "-keys", "50", "-paced-duration", "2s", "-paced-warmup", "1s", "-timeout", "3m")
	rows := map[string]map[string]string{}
	for _, row := range benchtest.Table(out) {
		switch what := row["what"]; {
		case strings.HasPrefix(what, "floor:") && strings.Contains(what, "acks confirmed"):
			rows["floor"] = row
		case strings.HasPrefix(what, "floor, paced"):
			rows["floor paced"] = row
		case strings.HasPrefix(what, "shaper, unpaced"):
			rows["unpaced"] = row
		case strings.HasPrefix(what, "shaper, paced"):
			rows["paced"] = row
		case strings.HasPrefix(what, "hand-off alone") && strings.Contains(what, "embedded"):
			rows["bare hand-off"] = row
		case strings.HasPrefix(what, "hand-off alone"):
			rows["bare hand-off on nats-server"] = row
		}
	}
	for _, name := range []string{"floor", "floor paced", "unpaced", "paced", "bare hand-off", "bare hand-off on nats-server"} {
		row, ok := rows[name]
		if !ok {
			t.Errorf("no %s row in the table", name)
			continue
		}
		for _, col := range []string{"deliveries/s", "CPU-µs per delivery (server side)"} {
			if _, ok := benchtest.Positive(row[col]); !ok {
				t.Errorf("%s row: %s %q, want a positive number", name, col, row[col])
			}
		}
	}
	for _, target := range []string{"target: unpaced confirmed delivery", "target: paced delivery", "a bare request per hand-off"} {
		if !strings.Contains(out, target) {
			t.Errorf("no line %q", target)
		}
	}
}
