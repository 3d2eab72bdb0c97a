// Command keymem measures what an active key costs a shaper in memory: its
// live heap after a GC and its resident set, per key, at several numbers
// of keys, beside the same shaper holding no key in the same run.
//
//	go run ./integration/bench/keymem [flags]
//
// It builds ./cmd/shaper, then for 0 keys (the baseline) and each N of
// -keys, in a shaper serve of its own (embedded JetStream on a temporary
// store, a policy of outflow 1/h per key and a queue of 2): it submits two
// jobs on each of N keys over HTTP, as producers do, waits until a
// consumer (answering every delivery on the shaper's NATS) has had each
// key's first job, so that every key holds one queued job that waits an
// hour, lets it settle for -settle, and reads the shaper's live heap from
// /debug/pprof/heap?gc=1&debug=1 (served to loopback without a token: a GC
// first, then runtime.MemStats.HeapAlloc and the sampled live heap by
// allocation stack) and its resident set (VmRSS, /proc/PID/status).
//
// The heap profile is sampled (a sample every 512 KiB allocated, scaled
// up as pprof does), so its split is an estimate: read it at 20,000 keys
// and more, where a key's bytes outweigh the sampling's noise. The heap
// is split by stack between the embedded nats-server (the
// stream's store and per-subject index) and the rest (the shaper's own
// state, its NATS client and the runtime), which the target bounds
// (≤ 1 KB of the shaper's heap a key; ≤ 2 KB of RSS). It prints one
// Markdown table (per N: total and per key over the baseline), the
// shaper's own heap per key by allocation site at the largest N, and the
// targets against it, and exits 0 once every row was measured, whatever
// the figures. With -profile it also writes each shaper's heap profile, to
// read with go tool pprof (-sample_index=inuse_space). A GOMEMLIMIT or GOGC in the environment reaches the shaper.
// Every child is killed and the temporary directory removed on exit, on
// SIGINT/SIGTERM and past -timeout.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
)

// config is what one run measures.
type config struct {
	keys     []int
	keysFlag string
	conns    int
	payload  int
	settle   time.Duration
	top      int
	profile  string
	benchkit.Common
}

func main() {
	var cfg config
	fs := benchkit.NewFlagSet("keymem", "Measures the shaper's live heap and RSS per active key, beside the same shaper with no key.")
	fs.StringVar(&cfg.keysFlag, "keys", "20000,100000", "comma-separated numbers of keys, each holding one queued job")
	fs.IntVar(&cfg.conns, "conns", 32, "HTTP connections submitting")
	fs.IntVar(&cfg.payload, "payload", 100, "payload bytes of every job")
	fs.DurationVar(&cfg.settle, "settle", 3*time.Second, "wait after the last first delivery before measuring")
	fs.IntVar(&cfg.top, "top", 12, "allocation sites listed")
	fs.StringVar(&cfg.profile, "profile", "", "also write each shaper's heap profile (for go tool pprof) into this directory")
	cfg.AddFlags(fs, "the build")
	fs.Parse(os.Args[1:])
	benchkit.Main("keymem", &cfg.Common, cfg.check, func(ctx context.Context, env benchkit.Env) error {
		b := &bench{cfg: cfg, env: env, shaper: cfg.ShaperBin}
		if err := benchkit.Build(ctx, env.Dir, benchkit.Target{Bin: &b.shaper, Pkg: "./cmd/shaper", Out: "shaper"}); err != nil {
			return err
		}
		if cfg.profile != "" {
			if err := os.MkdirAll(cfg.profile, 0o755); err != nil {
				return err
			}
		}
		load0 := benchkit.LoadAvg()
		env.Logf("load average %s", load0)
		var rows []row
		for _, n := range append([]int{0}, cfg.keys...) {
			r, err := b.measure(ctx, n)
			if err != nil {
				return fmt.Errorf("%d keys: %w", n, err)
			}
			env.Logf("%d keys: heap %.1f MB (shaper's own %.1f MB, nats-server %.1f MB), RSS %.1f MB", n, r.heap.alloc/1e6, r.heap.own/1e6, r.heap.server/1e6, r.rss/1e6)
			rows = append(rows, r)
		}
		report(os.Stdout, cfg, rows, load0, benchkit.LoadAvg())
		return nil
	})
}

func (c *config) check() error {
	for f := range strings.SplitSeq(c.keysFlag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-keys: %q is not a number of keys above 0", f)
		}
		c.keys = append(c.keys, n)
	}
	if c.conns < 1 || c.payload < 0 || c.settle < 0 || c.top < 0 {
		return errors.New("-conns must be at least 1; -payload, -settle and -top not negative")
	}
	return nil
}
