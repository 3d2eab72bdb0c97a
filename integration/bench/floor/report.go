package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
)

// The project's delivery targets (BENCHMARKS.md, "What limits each figure").
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
	fmt.Fprintf(w, "Paced rows: \"slots together\" means every key's delivery falls at the same instant, %d times a second (they share wake-ups and socket writes); "+
		"\"spread\" and \"evenly spaced\" mean one key's delivery every 1/%d s, as traffic from many producers comes. "+
		"\"hand-off alone\" sends one request per hand-off with a delivery's headers and payload and awaits its reply, storing nothing: the least a paced, confirmed delivery over NATS costs. "+
		"Rows without \"on the floor's nats-server\" run the shaper (or the sender) with an embedded nats-server, as shaper serve does.\n\n",
		cfg.pacedRate, cfg.pacedKeys*cfg.pacedRate)
	benchkit.TableRow(w, "what", "deliveries/s", "CPU-µs per delivery (server side)", "ratio to the floor", "CPU-µs per delivery by process")
	benchkit.TableRule(w, "---", "---:", "---:", "---", "---")
	base, pacedBase := rows[0], rows[0]
	var unpaced *row
	var paced, bare []string
	pacedMet := true
	embedded := map[string][2]float64{} // by phases: the shaper's and the bare hand-off's CPU-µs, embedded
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
			if len(r.server) == 1 {
				e := embedded[phases(r.what)]
				e[1] = r.cpuPer()
				embedded[phases(r.what)] = e
			}
		case r.paced && !shaper:
			pacedBase = r
			ratio = fmt.Sprintf("CPU %.2f× the unpaced floor's (throughput: paced, %.0f%% of %.0f/s)", r.cpuPer()/base.cpuPer(), 100*r.rate()/r.want, r.want)
		case r.paced:
			ratio = fmt.Sprintf("CPU %.2f× the paced floor's (throughput: paced, %.0f%% of %.0f/s)", r.cpuPer()/pacedBase.cpuPer(), 100*r.rate()/r.want, r.want)
			if len(r.server) == 1 { // embedded JetStream: the target's rows
				pacedMet = pacedMet && r.cpuPer() <= targetPacedCPU
				paced = append(paced, fmt.Sprintf("%.1f (%s)", r.cpuPer(), phases(r.what)))
				e := embedded[phases(r.what)]
				e[0] = r.cpuPer()
				embedded[phases(r.what)] = e
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
		var over []string
		for _, ph := range []string{"together", "spread"} {
			if e := embedded[ph]; e[0] > 0 && e[1] > 0 {
				over = append(over, fmt.Sprintf("%s %.2f×", ph, e[0]/e[1]))
			}
		}
		if len(over) > 0 {
			fmt.Fprintf(w, "the shaper paced ÷ the bare hand-off made the same way (both embedded): %s\n", strings.Join(over, ", "))
		}
	}
}

// phases says how a paced row's keys' slots fall: "together", "spread".
func phases(what string) string {
	if strings.Contains(what, "spread") || strings.Contains(what, "evenly spaced") {
		return "spread"
	}
	return "together"
}
