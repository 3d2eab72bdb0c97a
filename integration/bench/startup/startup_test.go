package main

import (
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchtest"
)

// TestStartupSmoke runs the benchmark end to end, small (one job on each of
// 2,000 keys, a baseline of 200), and checks that its table parses: both
// rows, every time positive and in order (the first delivery before the
// 1,000th, the N/10th, the N/2th and the last; /readyz may answer after
// deliveries started), every job delivered without a duplicate, the
// memory figures positive. The figures themselves are not judged.
func TestStartupSmoke(t *testing.T) {
	out := benchtest.Smoke(t, "four shapers", 2*time.Minute, "-keys", "2000", "-baseline", "200", "-timeout", "90s")
	rows := map[string]map[string]string{}
	for _, row := range benchtest.Table(out) {
		rows[row["keys (N)"]] = row
	}
	for _, keys := range []string{"200", "2,000"} {
		row, ok := rows[keys]
		if !ok {
			t.Errorf("no row for %s keys in the table", keys)
			continue
		}
		num := func(col string) float64 {
			v, ok := benchtest.Positive(row[col])
			if !ok {
				t.Errorf("%s keys: %s %q, want a positive number", keys, col, row[col])
			}
			return v
		}
		num("/readyz 200")
		first, thousand, all := num("first delivery"), num("1,000 deliveries"), num("all N delivered")
		tenth, half := num("N/10 delivered"), num("N/2 delivered")
		if !(first <= thousand && first <= tenth && tenth <= half && half <= all && thousand <= all) {
			t.Errorf("%s keys: first delivery %v s, 1,000th %v s, N/10th %v s, N/2th %v s, last %v s: out of order", keys, first, thousand, tenth, half, all)
		}
		if strings.Contains(row["all N delivered"], "duplicate") {
			t.Errorf("%s keys: %s", keys, row["all N delivered"])
		}
		for _, col := range []string{"filled at", "RSS at /readyz", "RSS at 1,000", "peak RSS (VmHWM at the end)"} {
			num(col)
		}
	}
	if !strings.Contains(out, "growth 200 → 2,000 keys") {
		t.Error("no growth line")
	}
}
