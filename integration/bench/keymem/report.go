package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
)

// The targets, per active key at the largest number of keys.
const (
	ownTarget = 1024 // bytes of the shaper's own heap
	rssTarget = 2048 // bytes of RSS
)

// report prints the table, the shaper's own heap per key by site at the
// largest N, and the targets.
func report(w io.Writer, cfg config, rows []row, load0, load1 string) {
	base := rows[0]
	fmt.Fprintf(w, "Memory per active key (one queued job each), over the same shaper with none; heap after a GC (load average %s at the start, %s at the end; GOMEMLIMIT=%q GOGC=%q)\n\n",
		load0, load1, os.Getenv("GOMEMLIMIT"), os.Getenv("GOGC"))
	benchkit.TableRow(w, "keys", "live heap", "heap per key", "shaper's own heap", "own per key", "nats-server's heap", "server per key", "RSS", "RSS per key", "peak RSS")
	benchkit.TableRule(w, "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:", "---:")
	per := func(v, b float64, n int) string {
		if n == 0 {
			return "(baseline)"
		}
		return benchkit.Thousands((v-b)/float64(n)) + " B"
	}
	mb := func(v float64) string { return fmt.Sprintf("%.1f MB", v/1e6) }
	for _, r := range rows {
		benchkit.TableRow(w, benchkit.Thousands(float64(r.keys)),
			mb(r.heap.alloc), per(r.heap.alloc, base.heap.alloc, r.keys),
			mb(r.heap.own), per(r.heap.own, base.heap.own, r.keys),
			mb(r.heap.server), per(r.heap.server, base.heap.server, r.keys),
			mb(r.rss), per(r.rss, base.rss, r.keys), mb(r.peak))
	}
	last := rows[len(rows)-1]
	if last.keys == 0 {
		return
	}
	fmt.Fprintf(w, "\nThe shaper's own heap per key at %s keys, by allocation site (the innermost frame of the module, else the innermost), over the baseline:\n\n", benchkit.Thousands(float64(last.keys)))
	benchkit.TableRow(w, "site", "bytes per key")
	benchkit.TableRule(w, "---", "---:")
	sites := slices.Collect(maps.Keys(last.heap.sites))
	growth := func(s string) float64 { return (last.heap.sites[s] - base.heap.sites[s]) / float64(last.keys) }
	slices.SortFunc(sites, func(a, b string) int { return cmp.Compare(growth(b), growth(a)) })
	for _, s := range sites[:min(cfg.top, len(sites))] {
		benchkit.TableRow(w, s, fmt.Sprintf("%.0f", growth(s)))
	}
	own := (last.heap.own - base.heap.own) / float64(last.keys)
	rss := (last.rss - base.rss) / float64(last.keys)
	fmt.Fprintf(w, "\nAt %s keys: the shaper's own heap %.0f B a key (target ≤ %d: %s), RSS %.0f B a key (target ≤ %d: %s)\n",
		benchkit.Thousands(float64(last.keys)), own, ownTarget, benchkit.Met(own <= ownTarget), rss, rssTarget, benchkit.Met(rss <= rssTarget))
}
