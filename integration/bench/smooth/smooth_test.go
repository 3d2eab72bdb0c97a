package main

import (
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchtest"
)

// TestSmoothSmoke runs the benchmark end to end, small (3 keys at 20/s for
// 2 s, the shaper and nginx), and checks that its table parses: a row for
// each side, each with a rate error, gap errors in order and a window
// count within reach of its bound. The figures themselves are not judged.
func TestSmoothSmoke(t *testing.T) {
	out := benchtest.Smoke(t, "a shaper, nginx and two consumers", 2*time.Minute, "-shapes", "3x20", "-duration", "2s", "-timeout", "90s")
	rows := benchtest.Table(out)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2 (shaper, nginx)", len(rows))
	}
	for i, side := range []string{"shaper", "nginx"} {
		row := rows[i]
		if row["side"] != side || row["keys × rate"] != "3 × 20/s" {
			t.Errorf("row %d: side %q, shape %q, want %s at 3 × 20/s", i, row["side"], row["keys × rate"], side)
		}
		if !strings.HasSuffix(row["rate error"], " %") {
			t.Errorf("%s: rate error %q, want a percentage", side, row["rate error"])
		}
		p50, ok1 := benchtest.Positive(row["gap error p50"])
		p99, ok2 := benchtest.Positive(row["p99"])
		most, ok3 := benchtest.Positive(row["most in a window (bound)"])
		if !ok1 || !ok2 || !ok3 || p50 > p99 {
			t.Errorf("%s: gap error p50 %q, p99 %q, most in a window %q: want positive, p50 ≤ p99", side, row["gap error p50"], row["p99"], row["most in a window (bound)"])
		}
		if most < 10 {
			t.Errorf("%s: at most %v arrivals of a key in a second at 20/s", side, most)
		}
	}
	if !strings.Contains(out, "3 × 20/s: shaper p99") {
		t.Error("no summary line")
	}
}
