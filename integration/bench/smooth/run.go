package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
)

// policyName is the measured policy's.
const policyName = "smooth"

// bench is one run's shared state.
type bench struct {
	cfg      config
	env      benchkit.Env
	shaper   string // the shaper binary
	base     string // another, measured in the same rounds (-base-bin); "": none
	nginxBin string
	self     string // this program, re-executed as the consumers
}

// run measures every shape, round and side, and prints the table.
func (b *bench) run(ctx context.Context) error {
	load0 := benchkit.LoadAvg()
	b.env.Logf("load average %s", load0)
	var rows []row
	for round := 1; round <= b.cfg.rounds; round++ {
		for _, sh := range b.cfg.shapes {
			sides := []string{"shaper", "base"}
			if round%2 == 0 {
				sides = []string{"base", "shaper"}
			}
			for _, side := range sides {
				bin := b.shaper
				if side == "base" {
					if bin = b.base; bin == "" {
						continue
					}
				}
				r, err := b.shaperRow(ctx, sh, round, side, bin)
				if err != nil {
					return fmt.Errorf("%s, %v: %w", side, sh, err)
				}
				b.env.Logf("%s", r.summary())
				rows = append(rows, r)
			}
			if !b.cfg.nginx {
				continue
			}
			r, err := b.nginxRow(ctx, sh, round)
			if err != nil {
				return fmt.Errorf("nginx, %v: %w", sh, err)
			}
			b.env.Logf("%s", r.summary())
			rows = append(rows, r)
		}
	}
	report(os.Stdout, b.cfg, rows, load0, benchkit.LoadAvg())
	return nil
}

// startConsumer starts a consumer role, waits until it listens and
// returns it with the file its arrivals will be written into.
func (b *bench) startConsumer(ctx context.Context, name string, args ...string) (*benchkit.Proc, string, error) {
	out := filepath.Join(b.env.Dir, name+".arrivals")
	p, err := b.env.Group.StartRole(name, b.self, append(args, "-out", out)...)
	if err != nil {
		return nil, "", err
	}
	if _, err := p.Expect(ctx, "ready", 30*time.Second); err != nil {
		return nil, "", err
	}
	return p, out, nil
}

// collect ends consumer c and reads the arrivals it wrote into out.
func collect(ctx context.Context, c *benchkit.Proc, out string) (map[string][]int64, error) {
	if err := c.CloseInput(); err != nil {
		return nil, err
	}
	if _, err := c.Expect(ctx, "written", 30*time.Second); err != nil {
		return nil, err
	}
	c.Stop(5 * time.Second)
	return readArrivals(out)
}

// shaperRow measures the shaper binary bin at shape sh, as side.
func (b *bench) shaperRow(ctx context.Context, sh shape, round int, side, bin string) (row, error) {
	name := fmt.Sprintf("%s-%dx%d-%d", side, sh.keys, sh.rate, round)
	// Enough jobs a key for the fill (bounded by a slow machine's), the
	// skip and the window, so that no key runs dry.
	perKey := int(math.Ceil(float64(sh.rate)*(b.cfg.skip+b.cfg.duration+15*time.Second).Seconds())) + 1
	s, err := b.env.Group.StartShaper(benchkit.ShaperConfig{
		Name:       name,
		Bin:        bin,
		PolicyFile: filepath.Join(b.env.Dir, name+".yaml"),
		Policy:     benchkit.Policy(policyName, fmt.Sprintf("%d/s", sh.rate), perKey, 0),
		Data:       filepath.Join(b.env.Dir, name),
		LogLevel:   "warn",
	})
	if err != nil {
		return row{}, err
	}
	defer s.P.Stop(15 * time.Second)
	if _, err := s.AwaitReady(ctx, 20*time.Millisecond, time.Minute); err != nil {
		return row{}, err
	}
	c, out, err := b.startConsumer(ctx, name+"-consumer", roleNATS, "-nats-url", s.NATSURL, "-subject", "shaper.out."+policyName+".>")
	if err != nil {
		return row{}, err
	}
	fillStart := time.Now()
	seeded := 0
	if b.cfg.spread > 0 {
		seeded = seedJobs
		if err := s.Seed(ctx, policyName, sh.keys, seedJobs, 100, b.phases(sh), b.cfg.conns); err != nil {
			return row{}, fmt.Errorf("first jobs: %w", err)
		}
	}
	if err := s.Submit(ctx, policyName, (perKey-seeded)*sh.keys, sh.keys, 100, b.cfg.conns); err != nil {
		return row{}, fmt.Errorf("fill: %w", err)
	}
	filled := time.Now()
	b.env.Logf("%s: filled %d jobs in %.1f s", name, perKey*sh.keys, filled.Sub(fillStart).Seconds())
	from := filled.Add(b.cfg.skip)
	if err := sleepUntil(ctx, from); err != nil {
		return row{}, err
	}
	cpu0, err := benchkit.CPUSeconds(s.P.Pid())
	if err != nil {
		return row{}, err
	}
	to := from.Add(b.cfg.duration)
	if err := sleepUntil(ctx, to); err != nil {
		return row{}, err
	}
	cpu1, err := benchkit.CPUSeconds(s.P.Pid())
	if err != nil {
		return row{}, err
	}
	arr, err := collect(ctx, c, out)
	if err != nil {
		return row{}, err
	}
	r := measure(side, sh, round, arr, from.UnixNano(), to.UnixNano(), b.cfg.window)
	r.cpuSecs = cpu1 - cpu0
	return r, nil
}

// sleepUntil sleeps until t or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(t)):
		return nil
	}
}

// phases is how long the keys' first jobs or requests are spread over
// (-spread of a period at sh's rate): key i starts at i/keys of it.
func (b *bench) phases(sh shape) time.Duration {
	return time.Duration(b.cfg.spread * float64(time.Second) / float64(sh.rate))
}

// seedJobs is how many jobs of each key Seed admits: the key's next slot
// then finds a job, and the key keeps its phase until the fill's come.
const seedJobs = 2
