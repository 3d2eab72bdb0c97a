package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/shaper-dev/shaper/integration/bench/internal/benchkit"
)

// shaperUnpacedRounds measures the shaper unpaced -unpaced-rounds times
// and, with -baseline-bin, the baseline build in each round too, first in
// the even rounds (ABBA: a load that rises or falls through a run favours
// neither), so that two builds are compared under the same load. Each run
// has a policy and a store of its own: unpaced (then unpaced2, unpaced3…)
// and baseline1, baseline2….
func (b *bench) shaperUnpacedRounds(ctx context.Context) ([]row, error) {
	var rows []row
	for round := 1; round <= b.cfg.unpacedRounds; round++ {
		name := "unpaced"
		if round > 1 {
			name = fmt.Sprintf("unpaced%d", round)
		}
		runs := []struct{ name, bin, what string }{{name, b.shaper, b.shaperWhat("unpaced, confirmed delivery")}}
		if b.cfg.baselineBin != "" {
			base := struct{ name, bin, what string }{fmt.Sprintf("baseline%d", round), b.cfg.baselineBin, "baseline " + b.shaperWhat("unpaced, confirmed delivery")}
			if runs = append(runs, base); round%2 == 0 {
				runs[0], runs[1] = runs[1], runs[0]
			}
		}
		for _, run := range runs {
			r, err := b.shaperUnpaced(ctx, run.name, run.bin, run.what)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", run.name, err)
			}
			b.logf("%s: %.0f deliveries/s", r.what, r.rate())
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// shaperUnpaced measures the shaper binary bin delivering n preloaded jobs
// over k keys at an outflow that does not bind, with policy name, in a row
// named what.
func (b *bench) shaperUnpaced(ctx context.Context, name, bin, what string) (row, error) {
	cfg := b.cfg
	perKey := (cfg.jobs + cfg.keys - 1) / cfg.keys
	s, err := b.startShaper(ctx, name, bin, "1000/s", min(1_000_000, max(1000, 2*perKey)), "")
	if err != nil {
		return row{}, err
	}
	c, err := b.startConsumer(ctx, name+"-consumer", s.NATSURL, "shaper.out."+name+".>", cfg.jobs)
	if err != nil {
		s.P.Stop(15 * time.Second)
		return row{}, err
	}
	defer stopWith(s, c)
	start := time.Now()
	cpu0, _ := benchkit.CPUSeconds(s.P.Pid())
	if err := s.Submit(ctx, name, cfg.jobs, cfg.keys, cfg.payload, 32); err != nil {
		return row{}, fmt.Errorf("preload: %w", err)
	}
	took := time.Since(start)
	// What admission cost the shaper, its watch included (which, reading
	// each job whole, takes the reads off the measured run): the jobs are
	// stored and reported a moment after the last answer.
	time.Sleep(500 * time.Millisecond)
	cpu1, _ := benchkit.CPUSeconds(s.P.Pid())
	b.logf("shaper, %s: %d jobs admitted in %.1f s, %.1f CPU-µs a job (admission, store, watch)", name, cfg.jobs, took.Seconds(), (cpu1-cpu0)*1e6/float64(cfg.jobs))
	// With -profile, a CPU profile of the shaper from the release on, for
	// as long as the unpaced run takes at 5,000 deliveries a second (the
	// seconds it outlasts the run are idle: they add no samples).
	profile := func() error { return nil }
	if cfg.profile != "" {
		profile = func() error {
			secs := (cfg.jobs + 4999) / 5000
			return s.Profile(ctx, fmt.Sprintf("profile?seconds=%d", secs), filepath.Join(cfg.profile, name+".cpu.pprof"))
		}
	}
	return b.unpaced(ctx, what, c, c, []*benchkit.Proc{s.P}, cfg.jobs, profile)
}

// shaperWhat names a shaper row with its settings.
func (b *bench) shaperWhat(what string) string {
	w := "default workers"
	if b.cfg.workers > 0 {
		w = fmt.Sprintf("%d workers", b.cfg.workers)
	}
	if b.cfg.partitions > 0 {
		w += fmt.Sprintf(", %d partitions", b.cfg.partitions)
	}
	return fmt.Sprintf("shaper, %s (%s)", what, w)
}
