package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
)

// The acceptance targets.
const (
	targetThroughput = 0.6 // unpaced confirmed delivery, × the floor's with acks confirmed
	targetPacedCPU   = 50  // CPU-µs per paced delivery
)

// report prints the rows as a Markdown table, then the targets against
// them. The first row is the floor with acks confirmed: the ratios' base.
func report(w io.Writer, cfg config, rows []row, load0, load1 string) {
	fmt.Fprintf(w, "\n%d jobs over %d keys, payload %d bytes; paced: %d keys × %d/s for %v; load average %s at the start, %s at the end; "+
		"CPU is utime+stime from /proc/PID/stat, in ticks of %d ms\n\n",
		cfg.jobs, cfg.keys, cfg.payload, cfg.pacedKeys, cfg.pacedRate, cfg.pacedDuration, load0, load1, 1000/benchkit.ClockTicks)
	benchkit.TableRow(w, "what", "deliveries/s", "CPU-µs per delivery (server side)", "ratio to the floor", "CPU-µs per delivery by process")
	benchkit.TableRule(w, "---", "---:", "---:", "---", "---")
	base, pacedBase := rows[0], rows[0]
	var unpaced *row
	var paced, bare []string
	pacedMet := true
	for i, r := range rows {
		ratio := fmt.Sprintf("throughput %.2f×, CPU %.2f×", r.rate()/base.rate(), r.cpuPer()/base.cpuPer())
		switch shaper := strings.HasPrefix(r.what, "shaper"); {
		case r.bare:
			ratio = fmt.Sprintf("CPU %.2f× the paced floor's (throughput: paced, %.0f%% of %.0f/s)", r.cpuPer()/pacedBase.cpuPer(), 100*r.rate()/r.want, r.want)
			where := "on the floor's nats-server"
			if len(r.server) == 1 {
				where = "embedded"
			}
			bare = append(bare, fmt.Sprintf("%.1f (%s, %s)", r.cpuPer(), phases(r.what), where))
		case r.paced && !shaper:
			pacedBase = r
			ratio = fmt.Sprintf("CPU %.2f× the unpaced floor's (throughput: paced, %.0f%% of %.0f/s)", r.cpuPer()/base.cpuPer(), 100*r.rate()/r.want, r.want)
		case r.paced:
			ratio = fmt.Sprintf("CPU %.2f× the paced floor's (throughput: paced, %.0f%% of %.0f/s)", r.cpuPer()/pacedBase.cpuPer(), 100*r.rate()/r.want, r.want)
			if len(r.server) == 1 { // embedded JetStream: the target's rows
				pacedMet = pacedMet && r.cpuPer() <= targetPacedCPU
				paced = append(paced, fmt.Sprintf("%.1f (%s)", r.cpuPer(), phases(r.what)))
			}
		case shaper:
			unpaced = &rows[i]
		}
		var split []string
		for _, u := range r.server {
			split = append(split, fmt.Sprintf("%s %.1f", u.name, u.cpu*1e6/float64(r.n)))
		}
		detail := strings.Join(split, " + ") + fmt.Sprintf("; consumer %.1f (not counted)", r.consumer*1e6/float64(r.n))
		if r.dups > 0 {
			detail += fmt.Sprintf("; %d duplicate deliveries", r.dups)
		}
		benchkit.TableRow(w, r.what, benchkit.Thousands(r.rate()), fmt.Sprintf("%.1f", r.cpuPer()), ratio, detail)
	}
	fmt.Fprintln(w)
	if unpaced != nil {
		x := unpaced.rate() / base.rate()
		fmt.Fprintf(w, "target: unpaced confirmed delivery ≥ %.1f× the floor's throughput (acks confirmed): %.2f× — %s\n", targetThroughput, x, benchkit.Met(x >= targetThroughput))
	}
	if len(paced) > 0 {
		fmt.Fprintf(w, "target: paced delivery (%d keys × %d/s) ≤ %d CPU-µs per delivery: %s — %s (the floor handing off at the same rate, evenly spaced: %.1f",
			cfg.pacedKeys, cfg.pacedRate, targetPacedCPU, strings.Join(paced, ", "), benchkit.Met(pacedMet), pacedBase.cpuPer())
		if len(bare) > 0 {
			fmt.Fprintf(w, "; a bare request per hand-off, nothing stored: %s", strings.Join(bare, ", "))
		}
		fmt.Fprintln(w, ")")
	}
}

// phases says how a paced row's keys' slots fall: "together", "spread".
func phases(what string) string {
	if strings.Contains(what, "spread") || strings.Contains(what, "evenly spaced") {
		return "spread"
	}
	return "together"
}
