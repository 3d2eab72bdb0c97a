package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// The acceptance target: first delivery after start-up on a store
// holding targetKeys keys' jobs.
const (
	targetKeys  = 100_000
	targetFirst = 10 * time.Second
)

// report prints the rows as a Markdown table, then the target against them.
func report(w io.Writer, cfg config, rows []row, load0, load1 string) {
	parts := "1 (default)"
	if cfg.partitions > 0 {
		parts = fmt.Sprint(cfg.partitions)
	}
	fmt.Fprintf(w, "\nshaper serve restarted (embedded JetStream) on a store holding one job on each of N keys, payload %d bytes; "+
		"partitions %s; times from the process's start; load average %s at the start, %s at the end\n\n",
		cfg.payload, parts, load0, load1)
	cols := []string{"keys (N)", "filled at", "/readyz 200", "consumer connected", "first delivery", "1,000 deliveries"}
	if cfg.all {
		cols = append(cols, "N/10 delivered", "N/2 delivered", "all N delivered")
	}
	cols = append(cols, "CPU at first delivery", "CPU at 1,000", "RSS at /readyz", "RSS at 1,000", "peak RSS (VmHWM at the end)")
	fmt.Fprintf(w, "| %s |\n", strings.Join(cols, " | "))
	fmt.Fprintf(w, "|%s\n", strings.Repeat(" ---: |", len(cols)))
	for _, r := range rows {
		milestone := secs(r.thousand)
		if r.keys < countAt {
			milestone += fmt.Sprintf(" (all %d)", r.keys)
		}
		cells := []string{thousands(float64(r.keys)), thousands(r.fillRate) + " jobs/s", secs(r.ready), secs(r.connected), secs(r.first), milestone}
		if cfg.all {
			all := secs(r.all)
			if r.dups > 0 {
				all += fmt.Sprintf(" (%d duplicates)", r.dups)
			}
			cells = append(cells, secs(r.tenth), secs(r.half), all)
		}
		cells = append(cells, fmt.Sprintf("%.2f s", r.cpuFirst), fmt.Sprintf("%.2f s", r.cpuAt), mb(r.rssAtReady), mb(r.rss), mb(r.peak))
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
	fmt.Fprintln(w)
	if len(rows) == 2 {
		a, b := rows[0], rows[1]
		x := float64(b.keys) / float64(a.keys)
		fmt.Fprintf(w, "growth %s → %s keys (%.0f×): first delivery %.1f×, peak RSS %.1f×\n",
			thousands(float64(a.keys)), thousands(float64(b.keys)), x, b.first.Seconds()/a.first.Seconds(), b.peak/a.peak)
	}
	for _, r := range rows {
		if r.profile != "" {
			fmt.Fprintf(w, "profiles of the %s-key start-up: CPU for %d s from /readyz 200: %s; heap at %s deliveries: %s\n",
				thousands(float64(r.keys)), cfg.profileSecs, r.profile, thousands(float64(min(countAt, r.keys))), r.heap)
		}
	}
	for _, r := range rows {
		if r.keys == targetKeys {
			fmt.Fprintf(w, "target: %s keys' jobs queued, first delivery after start-up under %v: %s — %s\n",
				thousands(float64(r.keys)), targetFirst, secs(r.first), met(r.first < targetFirst))
		}
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func mb(b float64) string { return fmt.Sprintf("%.0f MB", b/1e6) }

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
