package main

import (
	"fmt"
	"io"
	"time"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
)

// target is the issue's: per-key |gap − period| p99 at most this.
const target = 1500 * time.Microsecond

// report prints the table, then each shape's p99 range for each side and
// the target against it.
func report(w io.Writer, cfg config, rows []row, load0, load1 string) {
	phases := fmt.Sprintf("the keys' phases spread evenly over %.2f of a period on both sides", cfg.spread)
	if cfg.spread == 0 {
		phases = "the keys' phases as each side's start made them"
	}
	fmt.Fprintf(w, "Per-key delivery gaps at a consumer, %v windows after %v, %s; gap error: |gap − period| over every key's gaps; most arrivals of a key in any %v (load average %s at the start, %s at the end)\n\n",
		cfg.duration, cfg.skip, phases, cfg.window, load0, load1)
	benchkit.TableRow(w, "side", "keys × rate", "round", "rate error", "gap error p50", "p99", "max", "shortest gap", "most in a window (bound)", "CPU-µs/delivery")
	benchkit.TableRule(w, "---", "---", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:")
	for _, r := range rows {
		benchkit.TableRow(w, r.side, r.shape.String(), fmt.Sprint(r.round), fmt.Sprintf("%+.2f %%", 100*r.rateError()),
			ms(r.p50), ms(r.p99), ms(r.maxDev), ms(r.minGap), fmt.Sprintf("%d (%d)", r.maxInWindow, r.bound), fmt.Sprintf("%.0f", r.cpuPer()))
	}
	fmt.Fprintln(w)
	for _, sh := range cfg.shapes {
		s := p99Range(rows, "shaper", sh)
		line := fmt.Sprintf("%v: shaper p99 %s", sh, s)
		if cfg.baseBin != "" {
			line += fmt.Sprintf(", base p99 %s", p99Range(rows, "base", sh))
		}
		if cfg.nginx {
			line += fmt.Sprintf(", nginx p99 %s", p99Range(rows, "nginx", sh))
		}
		fmt.Fprintf(w, "%s; target p99 ≤ %s: %s\n", line, ms(target), benchkit.Met(worstP99(rows, "shaper", sh) <= target))
	}
}

// p99Range is the range of the p99s of side at sh over the rounds.
func p99Range(rows []row, side string, sh shape) string {
	lo, hi := time.Duration(-1), time.Duration(0)
	for _, r := range rows {
		if r.side == side && r.shape == sh {
			if lo < 0 || r.p99 < lo {
				lo = r.p99
			}
			hi = max(hi, r.p99)
		}
	}
	if lo == hi {
		return ms(hi)
	}
	return ms(lo) + "–" + ms(hi)
}

func worstP99(rows []row, side string, sh shape) time.Duration {
	var worst time.Duration
	for _, r := range rows {
		if r.side == side && r.shape == sh {
			worst = max(worst, r.p99)
		}
	}
	return worst
}
