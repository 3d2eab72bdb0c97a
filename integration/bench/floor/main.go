// Command floor measures, in one run and from outside the processes, what a
// delivery costs the shaper beside the NATS floor: the same jobs, the same
// payloads and the same hand-off to a consumer that answers every request.
//
//	go run ./integration/bench/floor [flags]
//
// It builds nats-server (from the module's requirement) and ./cmd/shaper,
// then measures, each in processes of its own:
//
//  1. The floor: a standalone nats-server with JetStream on a temporary
//     store, a work-queue stream preloaded with -jobs messages over -keys
//     subjects, and a worker (this program re-executed) pulling batches of
//     -batch with -fetchers fetches in flight, handing each message to the
//     consumer as a NATS request, waiting for the reply, then acking with
//     the server's confirmation (a double ack); and the same with acks not
//     awaited (-no-await=false skips it). Server side: nats-server + worker.
//  2. The shaper, unpaced: shaper serve with embedded JetStream, a policy
//     whose outflow (1000/s per key) does not bind, -jobs jobs over -keys
//     keys admitted over HTTP. Server side: the shaper process.
//  3. The shaper, paced: -paced-keys keys at -paced-rate a second each,
//     from queues that do not run dry, measured for -paced-duration after
//     -paced-warmup: the CPU per delivery and the rate reached.
//
// The consumer is this program re-executed too. It subscribes before the
// jobs are admitted, so no delivery ever finds "no responders", and for a
// shaper it holds the first deliveries unanswered until the clock starts,
// so the shaper starts with its pipeline full; the floor's worker instead
// fetches nothing until then. An unpaced row's clock runs from that
// release to the consumer's last job; CPU is each process's utime+stime
// from /proc/PID/stat at those two instants, taken once the processes went
// idle after the preload.
//
// It prints a table (what, deliveries/s, CPU-µs per delivery on the
// server side, ratios to the floor with acks confirmed, the CPU split)
// and the targets against it, and exits 0 once every row was
// measured, whatever the figures. Every child is killed and the temporary
// directory removed on exit, on SIGINT/SIGTERM and past -timeout.
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

	"github.com/nats-io/nats.go/jetstream"
)

// config is what one run measures.
type config struct {
	jobs, keys, payload        int
	pacedKeys, pacedRate       int
	pacedDuration, pacedWarmup time.Duration
	partitions, workers        int
	fetchers, batch            int
	noAwait                    bool
	timeout                    time.Duration
	shaperBin, natsBin         string
	keep                       bool
}

func main() {
	if ran, err := runRole(os.Args[1:], os.Stderr); ran {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	var cfg config
	fs := flag.NewFlagSet("floor", flag.ExitOnError)
	fs.IntVar(&cfg.jobs, "jobs", 20000, "jobs queued for the unpaced runs (N)")
	fs.IntVar(&cfg.keys, "keys", 1000, "keys (subjects) they are spread over (K)")
	fs.IntVar(&cfg.payload, "payload", 100, "payload bytes of every job")
	fs.IntVar(&cfg.pacedKeys, "paced-keys", 100, "keys of the paced run")
	fs.IntVar(&cfg.pacedRate, "paced-rate", 15, "outflow per key of the paced run, a second")
	fs.DurationVar(&cfg.pacedDuration, "paced-duration", 20*time.Second, "how long the paced run is measured")
	fs.DurationVar(&cfg.pacedWarmup, "paced-warmup", 2*time.Second, "paced deliveries before the measurement starts")
	fs.IntVar(&cfg.partitions, "partitions", 0, "the policies' partitions: field for the shaper runs (0: not set)")
	fs.IntVar(&cfg.workers, "workers", 0, "shaper serve --workers (0: its default)")
	fs.IntVar(&cfg.fetchers, "fetchers", 32, "the floor worker's fetches in flight (so deliveries in flight)")
	fs.IntVar(&cfg.batch, "batch", 256, "the floor worker's messages per fetch")
	fs.BoolVar(&cfg.noAwait, "no-await", true, "also measure the floor with acks not awaited")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Minute, "bound on the whole run, builds included")
	fs.StringVar(&cfg.shaperBin, "shaper-bin", "", "a shaper binary to measure instead of building ./cmd/shaper")
	fs.StringVar(&cfg.natsBin, "nats-server-bin", "", "a nats-server binary to use instead of building the module's")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the temporary directory (logs, stores) and say where it is")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: go run ./integration/bench/floor [flags]\n\n"+
			"Measures the shaper's delivery (unpaced and paced) beside the NATS floor in one run.\n\n")
		fs.PrintDefaults()
	}
	fs.Parse(os.Args[1:])
	if err := cfg.check(); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		stop()
		os.Exit(1)
	}
}

func (c config) check() error {
	switch {
	case c.jobs < 1 || c.keys < 1 || c.pacedKeys < 1 || c.pacedRate < 1:
		return errors.New("-jobs, -keys, -paced-keys and -paced-rate must be at least 1")
	case c.payload < 0 || c.partitions < 0 || c.workers < 0:
		return errors.New("-payload, -partitions and -workers must not be negative")
	case c.fetchers < 1 || c.batch < 1:
		return errors.New("-fetchers and -batch must be at least 1")
	case c.pacedDuration <= 0 || c.pacedWarmup < 0 || c.timeout <= 0:
		return errors.New("-paced-duration and -timeout must be positive, -paced-warmup not negative")
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
	dir, err := os.MkdirTemp("", "shaper-floor-")
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
		fmt.Fprintf(errw, "floor: "+format+"\n", a...)
	}}
	if b.self, err = os.Executable(); err != nil {
		return err
	}
	if b.nats, b.shaper, err = build(ctx, cfg, dir); err != nil {
		return err
	}
	load0 := loadAvg()
	b.logf("load average %s", load0)
	var rows []row
	ns, nc, url, err := b.startNATS(ctx)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		return err
	}
	variants := []bool{true}
	if cfg.noAwait {
		variants = append(variants, false)
	}
	for i, await := range variants {
		r, err := b.floor(ctx, ns, url, js, fmt.Sprintf("floor%d", i+1), await)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		b.logf("%s: %.0f deliveries/s", r.what, r.rate())
		rows = append(rows, r)
	}
	nc.Close()
	ns.stop(10 * time.Second)
	r, err := b.shaperUnpaced(ctx)
	if err != nil {
		return fmt.Errorf("shaper, unpaced: %w", err)
	}
	b.logf("%s: %.0f deliveries/s", r.what, r.rate())
	rows = append(rows, r)
	if r, err = b.shaperPaced(ctx); err != nil {
		return fmt.Errorf("shaper, paced: %w", err)
	}
	rows = append(rows, r)
	report(out, cfg, rows, load0, loadAvg())
	return nil
}

// build returns the nats-server and shaper binaries: the flags' or built
// into dir from the module that holds the working directory.
func build(ctx context.Context, cfg config, dir string) (natsBin, shaperBin string, err error) {
	natsBin, shaperBin = cfg.natsBin, cfg.shaperBin
	if natsBin != "" && shaperBin != "" {
		return natsBin, shaperBin, nil
	}
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", "", fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		return "", "", errors.New("run it inside the shaper module (go env GOMOD is empty)")
	}
	for _, t := range []struct {
		bin *string
		out string
		pkg string
	}{{&natsBin, "nats-server", "github.com/nats-io/nats-server/v2"}, {&shaperBin, "shaper", "./cmd/shaper"}} {
		if *t.bin != "" {
			continue
		}
		*t.bin = filepath.Join(dir, t.out)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", *t.bin, t.pkg)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", "", fmt.Errorf("go build %s: %v\n%s", t.pkg, err, b)
		}
	}
	return natsBin, shaperBin, nil
}
