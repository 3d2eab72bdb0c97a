package main

import (
	"fmt"
	"io"
	"strings"
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
		cfg.jobs, cfg.keys, cfg.payload, cfg.pacedKeys, cfg.pacedRate, cfg.pacedDuration, load0, load1, 1000/clockTicks)
	fmt.Fprintln(w, "| what | deliveries/s | CPU-µs per delivery (server side) | ratio to the floor | CPU-µs per delivery by process |")
	fmt.Fprintln(w, "| --- | ---: | ---: | --- | --- |")
	base := rows[0]
	var unpaced, paced *row
	for i, r := range rows {
		ratio := fmt.Sprintf("throughput %.2f×, CPU %.2f×", r.rate()/base.rate(), r.cpuPer()/base.cpuPer())
		if r.paced {
			ratio = fmt.Sprintf("CPU %.2f× (throughput: paced, %.0f%% of %.0f/s)", r.cpuPer()/base.cpuPer(), 100*r.rate()/r.want, r.want)
			paced = &rows[i]
		} else if strings.HasPrefix(r.what, "shaper") {
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
		fmt.Fprintf(w, "| %s | %s | %.1f | %s | %s |\n", r.what, thousands(r.rate()), r.cpuPer(), ratio, detail)
	}
	fmt.Fprintln(w)
	if unpaced != nil {
		x := unpaced.rate() / base.rate()
		fmt.Fprintf(w, "target: unpaced confirmed delivery ≥ %.1f× the floor's throughput (acks confirmed): %.2f× — %s\n", targetThroughput, x, met(x >= targetThroughput))
	}
	if paced != nil {
		fmt.Fprintf(w, "target: paced delivery (%d keys × %d/s) ≤ %d CPU-µs per delivery: %.1f — %s\n", cfg.pacedKeys, cfg.pacedRate, targetPacedCPU, paced.cpuPer(), met(paced.cpuPer() <= targetPacedCPU))
	}
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// thousands formats v rounded to a whole number with commas: 36,300.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
