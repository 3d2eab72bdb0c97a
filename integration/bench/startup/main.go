// Command startup measures how fast a shaper starts delivering from a store
// that already holds many keys' jobs: one job on each of -keys keys, then
// the same for -baseline keys, so that the growth shows in one run.
//
//	go run ./integration/bench/startup [flags]
//
// It builds ./cmd/shaper, then for each number of keys N, on a temporary
// data directory of its own:
//
//  1. Fill: it starts shaper serve with embedded JetStream and a policy
//     file that names another policy only (so nothing drains the measured
//     queue while it fills), opens the measured policy's queue on the
//     shaper's NATS with queue.Open, exactly as the shaper opens it, and
//     stores one job on each of N keys with queue.Queue.AdmitAsync (the
//     shaper's own job encoding, acknowledged by JetStream, a window of
//     -window publishes in flight), then stops the shaper with SIGTERM.
//  2. Restart: it starts shaper serve again on the same data directory
//     with the measured policy (-partitions P sets its partitions: field),
//     and a consumer connected to the shaper's NATS port as soon as it
//     listens (retrying every 10 ms), answering every delivery on
//     shaper.out.<policy>.>. From the instant the process is started it
//     measures: /readyz answering 200 (polled every 10 ms), the first
//     delivery, the 1,000th, with -all (the default) the N/10th, the
//     N/2th and the last one (every job once, counted by job id), the
//     shaper's CPU time (utime+stime from /proc/PID/stat) and its resident
//     memory (VmRSS, and the peak VmHWM, from /proc/PID/status).
//
// With -profile DIR it also takes, from the restarted shaper's
// /debug/pprof (served to loopback without a token), a CPU profile for
// -profile-seconds from the moment /readyz answers 200 (the start-up steps
// before that serve no pprof) and a heap profile at the 1,000th delivery,
// files per N.
//
// It prints a table and the target (first delivery under 10 s at
// 100,000 keys) against it, and exits 0 once every row was measured,
// whatever the figures. Every child is killed and the temporary directory
// removed on exit, on SIGINT/SIGTERM and past -timeout.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
)

// config is what one run measures.
type config struct {
	keys, baseline  int
	partitions      int
	payload, window int
	all             bool
	profile         string
	profileSecs     int
	benchkit.Common
}

func main() {
	var cfg config
	fs := benchkit.NewFlagSet("startup", "Measures a shaper's start-up on a store holding one job on each of many keys.")
	fs.IntVar(&cfg.keys, "keys", 100_000, "keys with one queued job each (N)")
	fs.IntVar(&cfg.baseline, "baseline", 10_000, "keys of the baseline row, measured first in the same run (0: none)")
	fs.IntVar(&cfg.partitions, "partitions", 0, "the policy's partitions: field (0: not set, the default)")
	fs.IntVar(&cfg.payload, "payload", 100, "payload bytes of every job")
	fs.IntVar(&cfg.window, "window", 4096, "publishes in flight while filling")
	fs.BoolVar(&cfg.all, "all", true, "also wait until every job was delivered (each once), and report when N/10 and N/2 were")
	fs.StringVar(&cfg.profile, "profile", "", "write a CPU profile of each restarted shaper into this directory")
	fs.IntVar(&cfg.profileSecs, "profile-seconds", 5, "length of the CPU profile, from /readyz 200 on")
	cfg.AddFlags(fs, "the build")
	fs.Parse(os.Args[1:])
	benchkit.Main("startup", &cfg.Common, cfg.check, func(ctx context.Context, env benchkit.Env) error {
		b := &bench{cfg: cfg, dir: env.Dir, g: env.Group, logf: env.Logf, shaper: cfg.ShaperBin}
		if err := benchkit.Build(ctx, env.Dir, benchkit.Target{Bin: &b.shaper, Pkg: "./cmd/shaper", Out: "shaper"}); err != nil {
			return err
		}
		return b.run(ctx, os.Stdout)
	})
}

func (c config) check() error {
	switch {
	case c.keys < 1 || c.baseline < 0:
		return errors.New("-keys must be at least 1, -baseline not negative")
	case c.partitions < 0 || c.partitions > 256:
		return errors.New("-partitions must be from 0 to 256")
	case c.payload < 0 || c.window < 1:
		return errors.New("-payload must not be negative, -window at least 1")
	case c.profileSecs < 1 || c.Timeout <= 0:
		return errors.New("-profile-seconds and -timeout must be positive")
	}
	return nil
}

// run measures every row and prints the table on out.
func (b *bench) run(ctx context.Context, out io.Writer) error {
	cfg := b.cfg
	if cfg.profile != "" {
		if err := os.MkdirAll(cfg.profile, 0o755); err != nil {
			return err
		}
	}
	load0 := benchkit.LoadAvg()
	b.logf("load average %s", load0)
	var sizes []int
	if cfg.baseline > 0 && cfg.baseline != cfg.keys {
		sizes = append(sizes, cfg.baseline)
	}
	sizes = append(sizes, cfg.keys)
	var rows []row
	for _, n := range sizes {
		r, err := b.measure(ctx, n)
		if err != nil {
			return fmt.Errorf("%d keys: %w", n, err)
		}
		b.logf("%d keys: ready %.2f s, first delivery %.2f s, 1,000 deliveries %.2f s", n, r.ready.Seconds(), r.first.Seconds(), r.thousand.Seconds())
		rows = append(rows, r)
	}
	report(out, cfg, rows, load0, benchkit.LoadAvg())
	return nil
}
