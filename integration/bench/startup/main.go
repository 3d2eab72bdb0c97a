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
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// config is what one run measures.
type config struct {
	keys, baseline  int
	partitions      int
	payload, window int
	all             bool
	profile         string
	profileSecs     int
	timeout         time.Duration
	shaperBin       string
	keep            bool
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("startup", flag.ExitOnError)
	fs.IntVar(&cfg.keys, "keys", 100_000, "keys with one queued job each (N)")
	fs.IntVar(&cfg.baseline, "baseline", 10_000, "keys of the baseline row, measured first in the same run (0: none)")
	fs.IntVar(&cfg.partitions, "partitions", 0, "the policy's partitions: field (0: not set, the default)")
	fs.IntVar(&cfg.payload, "payload", 100, "payload bytes of every job")
	fs.IntVar(&cfg.window, "window", 4096, "publishes in flight while filling")
	fs.BoolVar(&cfg.all, "all", true, "also wait until every job was delivered (each once), and report when N/10 and N/2 were")
	fs.StringVar(&cfg.profile, "profile", "", "write a CPU profile of each restarted shaper into this directory")
	fs.IntVar(&cfg.profileSecs, "profile-seconds", 5, "length of the CPU profile, from /readyz 200 on")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, "bound on the whole run, the build included")
	fs.StringVar(&cfg.shaperBin, "shaper-bin", "", "a shaper binary to measure instead of building ./cmd/shaper")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the temporary directory (logs, stores) and say where it is")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: go run ./integration/bench/startup [flags]\n\n"+
			"Measures a shaper's start-up on a store holding one job on each of many keys.\n\n")
		fs.PrintDefaults()
	}
	fs.Parse(os.Args[1:])
	if err := cfg.check(); err != nil {
		fmt.Fprintln(os.Stderr, "startup:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "startup:", err)
		stop()
		os.Exit(1)
	}
}

func (c config) check() error {
	switch {
	case c.keys < 1 || c.baseline < 0:
		return errors.New("-keys must be at least 1, -baseline not negative")
	case c.partitions < 0 || c.partitions > 256:
		return errors.New("-partitions must be from 0 to 256")
	case c.payload < 0 || c.window < 1:
		return errors.New("-payload must not be negative, -window at least 1")
	case c.profileSecs < 1 || c.timeout <= 0:
		return errors.New("-profile-seconds and -timeout must be positive")
	}
	return nil
}

// run measures every row and prints the table on out, progress on errw.
func run(ctx context.Context, cfg config, out, errw io.Writer) (err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.timeout, fmt.Errorf("past -timeout %v", cfg.timeout))
	defer cancel()
	defer func() {
		if err != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", err, context.Cause(ctx))
		}
	}()
	dir, err := os.MkdirTemp("", "shaper-startup-")
	if err != nil {
		return err
	}
	g := &group{dir: dir}
	defer func() {
		g.killAll()
		if cfg.keep {
			fmt.Fprintf(errw, "kept %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()
	b := &bench{cfg: cfg, dir: dir, g: g, logf: func(format string, a ...any) {
		fmt.Fprintf(errw, "startup: "+format+"\n", a...)
	}}
	if b.shaper, err = build(ctx, cfg, dir); err != nil {
		return err
	}
	if cfg.profile != "" {
		if err := os.MkdirAll(cfg.profile, 0o755); err != nil {
			return err
		}
	}
	load0 := loadAvg()
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
	report(out, cfg, rows, load0, loadAvg())
	return nil
}

// build returns the shaper binary: the flag's, or built into dir from the
// module that holds the working directory.
func build(ctx context.Context, cfg config, dir string) (string, error) {
	if cfg.shaperBin != "" {
		return cfg.shaperBin, nil
	}
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(gomod))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run it inside the shaper module (go env GOMOD is empty)")
	}
	bin := filepath.Join(dir, "shaper")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/shaper")
	cmd.Dir = filepath.Dir(mod)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/shaper: %v\n%s", err, b)
	}
	return bin, nil
}
