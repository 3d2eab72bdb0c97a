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
//     Then the floor paced: the same worker handing messages off at the
//     paced run's rate (-paced-keys × -paced-rate a second, evenly spread,
//     acks confirmed), measured like the shaper's paced row: what a plain
//     pull consumer pays per delivery when hand-offs come one at a time.
//     And the shaper paced on that same nats-server (--nats-url), server
//     side nats-server + shaper, like for like in processes (its keys'
//     slots together, where the floor's hand-offs are spread). Then the
//     bare hand-off at that rate on that server: nothing stored, read or
//     removed, each hand-off one request (with a shaper delivery's headers
//     and payload) sent at its own instant and answered: what any paced,
//     confirmed delivery over NATS costs at the least.
//  2. The shaper, unpaced: shaper serve with embedded JetStream, a policy
//     whose outflow (1000/s per key) does not bind, -jobs jobs over -keys
//     keys admitted over HTTP. Server side: the shaper process. It runs
//     -unpaced-rounds times, with -baseline-bin each round beside the same
//     run of that other build (rows "baseline shaper, …", first in the even
//     rounds): two builds compared under the same load; the target line
//     reads the shaper's last round.
//  3. The shaper, paced: -paced-keys keys at -paced-rate a second each,
//     from queues that do not run dry, measured for -paced-duration after
//     -paced-warmup: the CPU per delivery and the rate reached; first with
//     the keys' slots together (every key's delivery at once, -paced-rate
//     times a second), then spread (one key's every period/keys, as the
//     floor's evenly spaced hand-offs). After each, the bare hand-off the
//     same way, in a process of its own with an embedded nats-server, as
//     shaper serve runs: the least that row can cost.
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
// and the project's delivery targets against it, and exits 0 once every row was
// measured, whatever the figures. Every child is killed and the temporary
// directory removed on exit, on SIGINT/SIGTERM and past -timeout.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
)

// config is what one run measures.
type config struct {
	jobs, keys, payload        int
	pacedKeys, pacedRate       int
	pacedDuration, pacedWarmup time.Duration
	partitions, workers        int
	fetchers, batch            int
	noAwait                    bool
	profile                    string
	natsBin                    string
	baselineBin                string
	unpacedRounds              int
	benchkit.Common
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
	fs := benchkit.NewFlagSet("floor", "Measures the shaper's delivery (unpaced and paced) beside the NATS floor in one run.")
	fs.IntVar(&cfg.jobs, "jobs", 20000, "jobs queued for the unpaced runs")
	fs.IntVar(&cfg.keys, "keys", 1000, "keys (subjects) the unpaced runs' jobs are spread over")
	fs.IntVar(&cfg.payload, "payload", 100, "payload bytes of every job")
	fs.IntVar(&cfg.pacedKeys, "paced-keys", 100, "keys of the paced run")
	fs.IntVar(&cfg.pacedRate, "paced-rate", 15, "outflow per key of the paced run, a second")
	fs.DurationVar(&cfg.pacedDuration, "paced-duration", 20*time.Second, "how long the paced run is measured")
	fs.DurationVar(&cfg.pacedWarmup, "paced-warmup", 2*time.Second, "how long each paced run delivers before its measurement starts")
	fs.IntVar(&cfg.partitions, "partitions", 0, "the partitions: field of the shaper runs' policies (0: left out, the default)")
	fs.IntVar(&cfg.workers, "workers", 0, "shaper serve --workers (0: its default)")
	fs.IntVar(&cfg.fetchers, "fetchers", 32, "the floor worker's fetches in flight (so deliveries in flight)")
	fs.IntVar(&cfg.batch, "batch", 256, "the floor worker's messages per fetch")
	fs.BoolVar(&cfg.noAwait, "no-await", true, "also measure the floor with acks not awaited (-no-await=false skips that run)")
	fs.StringVar(&cfg.profile, "profile", "", "write CPU profiles of the shaper to DIR: unpaced.cpu.pprof over its unpaced run (unpaced2…, baseline1… over the others), paced.cpu.pprof (embedded JetStream, slots together), spread.cpu.pprof (slots spread) and pacedx.cpu.pprof (on the floor's nats-server) over its paced runs' measurements")
	fs.StringVar(&cfg.natsBin, "nats-server-bin", "", "a nats-server binary to use instead of building the module's")
	fs.StringVar(&cfg.baselineBin, "baseline-bin", "", "a second shaper binary, measured unpaced right after each unpaced run of the shaper: two builds under the same load")
	fs.IntVar(&cfg.unpacedRounds, "unpaced-rounds", 1, "unpaced runs of the shaper (with -baseline-bin, each beside one of the baseline's, which goes first in the even rounds)")
	cfg.AddFlags(fs, "builds")
	fs.Parse(os.Args[1:])
	benchkit.Main("floor", &cfg.Common, cfg.check, func(ctx context.Context, env benchkit.Env) error {
		b := &bench{cfg: cfg, dir: env.Dir, g: env.Group, logf: env.Logf, nats: cfg.natsBin, shaper: cfg.ShaperBin}
		if cfg.profile != "" {
			if err := os.MkdirAll(cfg.profile, 0o755); err != nil {
				return err
			}
		}
		var err error
		if b.self, err = os.Executable(); err != nil {
			return err
		}
		err = benchkit.Build(ctx, env.Dir, benchkit.Target{Bin: &b.nats, Pkg: "github.com/nats-io/nats-server/v2", Out: "nats-server"},
			benchkit.Target{Bin: &b.shaper, Pkg: "./cmd/shaper", Out: "shaper"})
		if err != nil {
			return err
		}
		return b.run(ctx, os.Stdout)
	})
}

func (c config) check() error {
	switch {
	case c.jobs < 1 || c.keys < 1 || c.pacedKeys < 1 || c.pacedRate < 1:
		return errors.New("-jobs, -keys, -paced-keys and -paced-rate must be at least 1")
	case c.payload < 0 || c.partitions < 0 || c.workers < 0:
		return errors.New("-payload, -partitions and -workers must not be negative")
	case c.fetchers < 1 || c.batch < 1 || c.unpacedRounds < 1:
		return errors.New("-fetchers, -batch and -unpaced-rounds must be at least 1")
	case c.pacedDuration <= 0 || c.pacedWarmup < 0 || c.Timeout <= 0:
		return errors.New("-paced-duration and -timeout must be positive, -paced-warmup not negative")
	}
	return nil
}

// run measures every row and prints the table on out.
func (b *bench) run(ctx context.Context, out io.Writer) error {
	cfg := b.cfg
	load0 := benchkit.LoadAvg()
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
	r, err := b.floorPaced(ctx, ns, url, js, "floorp")
	if err != nil {
		return fmt.Errorf("floor, paced: %w", err)
	}
	b.logf("%s: %.0f deliveries/s", r.what, r.rate())
	rows = append(rows, r)
	if r, err = b.shaperPaced(ctx, "pacedx", ns, url, false); err != nil {
		return fmt.Errorf("shaper, paced on nats-server: %w", err)
	}
	rows = append(rows, r)
	if r, err = b.handoffPaced(ctx, "bare-x", ns, url, true); err != nil {
		return fmt.Errorf("hand-off alone, paced on nats-server: %w", err)
	}
	rows = append(rows, r)
	nc.Close()
	ns.Stop(10 * time.Second)
	unpaced, err := b.shaperUnpacedRounds(ctx)
	if err != nil {
		return err
	}
	rows = append(rows, unpaced...)
	for _, spread := range []bool{false, true} {
		name := map[bool]string{false: "paced", true: "spread"}[spread]
		if r, err = b.shaperPaced(ctx, name, nil, "", spread); err != nil {
			return fmt.Errorf("shaper, paced: %w", err)
		}
		rows = append(rows, r)
		if r, err = b.handoffPaced(ctx, "bare-"+name, nil, "", !spread); err != nil {
			return fmt.Errorf("hand-off alone, paced: %w", err)
		}
		rows = append(rows, r)
	}
	report(out, cfg, rows, load0, benchkit.LoadAvg())
	return nil
}
