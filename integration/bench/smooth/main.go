// Command smooth measures how evenly a shaper spaces each key's deliveries,
// at a real consumer, beside nginx's limit_req in delay mode in the same
// run: the per-key |gap − period| that a consumer sees.
//
//	go run ./integration/bench/smooth [flags]
//
// For each shape of -shapes (keys × rate a second per key; default 1 × 50,
// 100 × 10 and 1,000 × 1) and each of -rounds rounds, it measures, each in
// processes of its own:
//
//  1. The shaper: shaper serve (built from ./cmd/shaper) with embedded
//     JetStream and a policy of that outflow per key, a consumer (this
//     program re-executed) answering every delivery on shaper.out.<policy>.>
//     and noting when each came, and every key filled over HTTP with more
//     jobs than it can deliver in the run (the keys never run dry). The
//     measured window starts -skip after the last job was admitted.
//  2. nginx: nginx (installed with apt-get when missing and running as
//     root) in front of a trivial upstream (this program re-executed,
//     noting when each request came and answering 200), with
//     limit_req_zone $uri at the same rate and a burst that never
//     refuses (delay mode, no nodelay), and -inflight requests per key
//     kept outstanding by this program, so every key always has one
//     waiting. The window starts -skip after the last key's load started.
//
// Both sides get the same phases: the keys' first jobs (two a key, before
// the rest of the fill) and the keys' first requests start evenly spread
// over -spread of a period, key i at i/keys of it (each side sees a key's
// first job at once, and keeps the key on that grid after). Left to their
// own pace (-spread 0), the fill puts every key's first job in within about
// 0.15 s while nginx's load opens its connections over about 0.33 s at
// 1,000 keys: the shaper's slots then come twice as dense.
//
// With -base-bin, a second shaper binary is measured in the same rounds,
// interleaved with the build (the build first in odd rounds, the base
// first in even ones): the same-run baseline of a change.
//
// Over the window of -duration, per key, it takes every gap between two
// consecutive arrivals at the consumer and reports, over all keys, the
// rate reached against keys × rate (its error), |gap − period| at p50,
// p99 and max, the shortest gap, and the most arrivals of one key in any
// -window (against the bound ⌈window·rate⌉+1 of a key that catches up
// after being late), plus the shaper's CPU per delivery.
//
// It prints one Markdown table (a row per shape and round for each side)
// and the target (p99 ≤ 1.5 ms, and no worse than nginx) against
// it, and exits 0 once every row was measured, whatever the figures.
// Every child is killed and the temporary directory removed on exit, on
// SIGINT/SIGTERM and past -timeout.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
)

// shape is one load: keys keys at rate deliveries a second each.
type shape struct{ keys, rate int }

func (s shape) String() string { return fmt.Sprintf("%d × %d/s", s.keys, s.rate) }

// config is what one run measures.
type config struct {
	shapes       []shape
	shapesFlag   string
	rounds       int
	duration     time.Duration
	skip, window time.Duration
	inflight     int
	conns        int
	nginx        bool
	spread       float64
	baseBin      string
	benchkit.Common
}

func main() {
	if ok, err := runRole(os.Args[1:]); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, "smooth:", err)
			os.Exit(1)
		}
		return
	}
	var cfg config
	fs := benchkit.NewFlagSet("smooth", "Measures each key's delivery gaps at a consumer, beside nginx limit_req in the same run.")
	fs.StringVar(&cfg.shapesFlag, "shapes", "1x50,100x10,1000x1", "comma-separated loads, each KEYSxRATE (deliveries a second per key)")
	fs.IntVar(&cfg.rounds, "rounds", 1, "rounds of every shape")
	fs.DurationVar(&cfg.duration, "duration", 20*time.Second, "the measured window of each row")
	fs.DurationVar(&cfg.skip, "skip", 500*time.Millisecond, "left out at the start of each row (after the fill or the load's start)")
	fs.DurationVar(&cfg.window, "window", time.Second, "the window of the most arrivals of one key")
	fs.IntVar(&cfg.inflight, "inflight", 3, "requests outstanding per key against nginx")
	fs.IntVar(&cfg.conns, "conns", 32, "HTTP connections filling the shaper's keys")
	fs.BoolVar(&cfg.nginx, "nginx", true, "measure nginx too (installed with apt-get when missing)")
	fs.Float64Var(&cfg.spread, "spread", 1, "the keys' first jobs (the shaper) and first requests (nginx) start evenly spread over this share of a period, the same phases on both sides; 0: as fast as each side takes them (not the same phases)")
	fs.StringVar(&cfg.baseBin, "base-bin", "", "another shaper binary (the build before, say) measured in the same rounds, interleaved with the build: its rows are side \"base\"")
	cfg.AddFlags(fs, "the build")
	fs.Parse(os.Args[1:])
	benchkit.Main("smooth", &cfg.Common, cfg.check, func(ctx context.Context, env benchkit.Env) error {
		b := &bench{cfg: cfg, env: env, shaper: cfg.ShaperBin, base: cfg.baseBin}
		if err := benchkit.Build(ctx, env.Dir, benchkit.Target{Bin: &b.shaper, Pkg: "./cmd/shaper", Out: "shaper"}); err != nil {
			return err
		}
		if cfg.nginx {
			var err error
			if b.nginxBin, err = findNginx(env.Logf); err != nil {
				return err
			}
		}
		self, err := os.Executable()
		if err != nil {
			return err
		}
		b.self = self
		return b.run(ctx)
	})
}

func (c *config) check() error {
	for f := range strings.SplitSeq(c.shapesFlag, ",") {
		k, r, ok := strings.Cut(strings.TrimSpace(f), "x")
		keys, err1 := strconv.Atoi(k)
		rate, err2 := strconv.Atoi(r)
		if !ok || err1 != nil || err2 != nil || keys < 1 || rate < 1 || rate > 1000 {
			return fmt.Errorf("-shapes: %q is not KEYSxRATE with both at least 1 (rate at most 1000)", f)
		}
		c.shapes = append(c.shapes, shape{keys, rate})
	}
	switch {
	case c.rounds < 1 || c.inflight < 2 || c.conns < 1:
		return errors.New("-rounds and -conns must be at least 1, -inflight at least 2")
	case c.duration < time.Second || c.skip < 0 || c.window <= 0:
		return errors.New("-duration must be at least 1s, -skip not negative, -window positive")
	case c.spread < 0 || c.spread > 1:
		return errors.New("-spread must be from 0 to 1")
	}
	return nil
}

// findNginx returns nginx's path, installing Debian's nginx-light with
// apt-get when it is missing.
func findNginx(logf func(string, ...any)) (string, error) {
	for _, p := range []string{"nginx", "/usr/sbin/nginx"} {
		if path, err := exec.LookPath(p); err == nil {
			return path, nil
		}
	}
	logf("nginx missing: apt-get install -y nginx-light")
	if out, err := exec.Command("apt-get", "install", "-y", "nginx-light").CombinedOutput(); err != nil {
		return "", fmt.Errorf("apt-get install nginx-light: %v\n%s", err, out)
	}
	return exec.LookPath("/usr/sbin/nginx")
}
