package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/drain/downstream"
	"github.com/shaper-dev/shaper/internal/cmdline"
	"github.com/shaper-dev/shaper/internal/suggest"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/client"
	"github.com/shaper-dev/shaper/shaper/replay"
)

func tuneCommand() *cli.Command {
	return &cli.Command{
		Name:  "tune",
		Usage: "replay a trace through the shaper's own admission and drain for a grid of outflows and queues, and recommend one",
		Description: `Replays every submission of --trace (see shaper record, producer trace) on a
virtual clock through the shaper's admission gate and drain scheduler, once per
candidate: every combination of --outflow, --queue and --total (by default the
policy's own values, half and twice them), and the policy as it is. Prints a
table per candidate and, with targets, recommends the cheapest candidate that
meets them (the lowest outflow, then the smallest queue) and says which target
binds; exit status 1 when none does. --apply tunes the running shaper to it.

The replay's downstream takes every delivery, unless --down says when it fails:
--down 0s-10s (repeatable) makes every delivery in that window of trace time
(from the trace's start) a failed attempt, retried under the policy's retry
settings or dead-lettered, as a consumer answering with an error would.
--downstream-capacity 50/s simulates a downstream of that capacity (changing
with --downstream-step 1m=20/s): what is offered beyond it queues there, its
latency grows, and past the policy's deliver.timeout a delivery fails; an
adaptive outflow (adapt:) adapts to it as to a real one.`,
		Flags: append(apiFlags(),
			&cli.StringFlag{Name: "policy-file", Value: "policies.yaml", Usage: "policy `FILE` (YAML) with the policy to tune", EnvVars: envVar("policy-file")},
			&cli.StringFlag{Name: "policy", Usage: "`NAME` of the policy to tune (default: the file's only policy)"},
			&cli.StringFlag{Name: "trace", Required: true, Usage: "trace `FILE` (CSV: at,key,size,outcome)"},
			&cli.StringFlag{Name: "outflow", Usage: "outflows per key to try, comma-separated `RATES` (default: half, the policy's, twice)"},
			&cli.StringFlag{Name: "queue", Usage: "queue sizes to try, comma-separated `SIZES` (default: half, the policy's, twice)"},
			&cli.StringFlag{Name: "total", Usage: "total caps to try, comma-separated `RATES`, none for no cap (default: the policy's, and --downstream-max)"},
			&cli.DurationFlag{Name: "max-wait", Usage: "target: p99 time in queue at most `D`, e.g. 5s", DefaultText: "no target"},
			&cli.StringFlag{Name: "max-reject", Usage: "target: at most `PERCENT` of submissions rejected, e.g. 1%", DefaultText: "no target"},
			&cli.StringFlag{Name: "downstream-max", Usage: "target: at most `RATE` deliveries over all keys, e.g. 300/s", DefaultText: "no target"},
			&cli.StringSliceFlag{Name: "down", Usage: "the downstream fails every delivery in this `WINDOW` of trace time, FROM-TO from the trace's start, e.g. 0s-10s (repeatable)", DefaultText: "never"},
			&cli.StringFlag{Name: "adapt", Usage: "adaptive outflows to try, comma-separated: off (the fixed outflow), key or policy (adapt: {per: ...}, the policy's other adapt fields kept)", DefaultText: "the policy's"},
			&cli.StringFlag{Name: "downstream-capacity", Usage: "simulate a downstream serving `RATE` deliveries over all keys, e.g. 50/s: more offered queues there, and times out past the policy's deliver.timeout", DefaultText: "takes everything at once"},
			&cli.DurationFlag{Name: "downstream-latency", Value: downstream.DefaultLatency, Usage: "the simulated downstream's latency when nothing waits"},
			&cli.StringSliceFlag{Name: "downstream-step", Usage: "the simulated downstream serves `AT=RATE` from AT of trace time on, e.g. 1m=20/s (repeatable)"},
			&cli.StringFlag{Name: "plot", Usage: "draw queue depth and time in queue over the trace (current and recommended) and the reject/wait trade-off into `FILE.svg`"},
			&cli.BoolFlag{Name: "apply", Usage: "tune the running shaper (--http, --admin-token) to the recommendation"},
			&cli.BoolFlag{Name: "json", Usage: "print the results as JSON"},
			&cli.IntFlag{Name: "parallel", Value: runtime.GOMAXPROCS(0), Usage: "candidates replayed at once"},
			&cli.IntFlag{Name: "max-payload", Value: 1 << 20, Usage: "largest job payload, in bytes, as the shaper's --max-payload"},
		),
		Action: runTune,
	}
}

// tuning is what one run of shaper tune was asked.
type tuning struct {
	set     *policies.Set
	policy  string
	trace   string
	grid    replay.Grid
	targets replay.Targets
	down    replay.Downstream
	facts   traceFacts // the trace, read through once before any replay
}

func tuningFrom(c *cli.Context) (tuning, error) {
	t := tuning{trace: c.String("trace"), policy: c.String("policy")}
	if err := tuneValues(c); err != nil {
		return t, cli.Exit("shaper tune: "+err.Error(), cmdline.ExitUsage)
	}
	set, err := policies.Load(c.String("policy-file"))
	if err != nil {
		return t, cli.Exit("shaper tune: "+err.Error(), 2)
	}
	t.set = set
	if t.policy == "" {
		all := set.Policies()
		if len(all) != 1 {
			names := make([]string, len(all))
			for i, p := range all {
				names[i] = p.Name
			}
			return t, cli.Exit(fmt.Sprintf("shaper tune: --policy: %s has %d policies, say which to tune: %s", c.String("policy-file"), len(all), strings.Join(names, ", ")), 2)
		}
		t.policy = all[0].Name
	}
	p, ok := set.Lookup(t.policy)
	if !ok {
		var names []string
		for _, p := range set.Policies() {
			names = append(names, p.Name)
		}
		return t, cli.Exit(fmt.Sprintf("shaper tune: --policy: %s has no policy %q; it has %s%s", c.String("policy-file"), t.policy,
			strings.Join(names, ", "), suggest.Hint(t.policy, names)), 2)
	}
	// Read through once before any replay: a trace that is not one is a
	// bad --trace, said once (not by every candidate's replay).
	if t.facts, err = readTraceFacts(t.trace, p.Queue); err != nil {
		return t, cli.Exit("shaper tune: --trace: "+err.Error(), 2)
	}
	if t.facts.submissions() == 0 {
		return t, cli.Exit(fmt.Sprintf("shaper tune: --trace: %s holds no submissions: nothing to replay (record one with shaper record or producer trace)", t.trace), 2)
	}
	if note := t.facts.unitsNote(); note != "" {
		fmt.Fprintln(c.App.ErrWriter, "shaper tune: "+note)
	}
	var downstream policies.Rate
	if t.targets, downstream, err = targetsFrom(c); err != nil {
		return t, cli.Exit("shaper tune: "+err.Error(), 2)
	}
	if t.grid, err = gridFrom(c, p, downstream); err != nil {
		return t, cli.Exit("shaper tune: "+err.Error(), 2)
	}
	if t.down, err = downFrom(c); err != nil {
		return t, cli.Exit("shaper tune: "+err.Error(), 2)
	}
	if t.down.Model, err = modelFrom(c, p); err != nil {
		return t, cli.Exit("shaper tune: "+err.Error(), 2)
	}
	if c.Bool("apply") && t.targets == (replay.Targets{}) {
		return t, cli.Exit("shaper tune: --apply needs a target to recommend by (--max-wait, --max-reject or --downstream-max)", cmdline.ExitUsage)
	}
	return t, nil
}

// tuneValues checks, before a replay that may take minutes, the values
// only its end would use or that mean nothing: --parallel and
// --max-payload below 1, a --plot file that is not *.svg or cannot be
// written where it is named, and --http for --apply.
func tuneValues(c *cli.Context) error {
	if n := c.Int("parallel"); n < 1 {
		return fmt.Errorf("--parallel %d: want at least 1 (candidates replayed at once)", n)
	}
	if n := c.Int("max-payload"); n < 1 {
		return fmt.Errorf("--max-payload %d: want at least 1 (bytes)", n)
	}
	if c.IsSet("plot") {
		if err := plotWritable(c.String("plot")); err != nil {
			return fmt.Errorf("--plot %w", err)
		}
	}
	if c.Bool("apply") {
		if err := cmdline.HostPort(c.String("http")); err != nil {
			return badHTTP(c.String("http"), err)
		}
	}
	return nil
}

// holdRejections bounds the rejections of a recommendation by those of the
// policy as it is when targets give none (--max-reject) but give another:
// the cheapest candidate that meets only a wait or a downstream target is
// often a smaller queue refusing what the policy takes now, which nobody
// asked for. It reports whether it set the bound.
func holdRejections(t *replay.Targets, current *replay.Result) bool {
	if t.MaxReject != nil || *t == (replay.Targets{}) {
		return false
	}
	v := current.RejectedShare()
	t.MaxReject = &v
	return true
}

// downFrom returns the downstream --down describes.
func downFrom(c *cli.Context) (replay.Downstream, error) {
	var d replay.Downstream
	for _, s := range c.StringSlice("down") {
		w, err := replay.ParseWindow(s)
		if err != nil {
			return d, fmt.Errorf("--down %w", err)
		}
		d.Down = append(d.Down, w)
	}
	return d, nil
}

// targetsFrom returns the targets the flags ask for, and the rate of
// --downstream-max (zero when not given).
func targetsFrom(c *cli.Context) (t replay.Targets, downstream policies.Rate, err error) {
	if c.IsSet("max-wait") {
		if t.MaxWait = c.Duration("max-wait"); t.MaxWait <= 0 {
			return t, downstream, fmt.Errorf("--max-wait %s: want a positive duration", t.MaxWait)
		}
	}
	if c.IsSet("max-reject") {
		s := strings.TrimSpace(c.String("max-reject"))
		num, percent := strings.CutSuffix(s, "%")
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || !(v >= 0 && v <= 100) {
			return t, downstream, fmt.Errorf("--max-reject %q: want a percentage from 0 to 100, such as 1%%", s)
		}
		if !percent && v != 0 {
			// A bare share reads either way: retry.budget takes 0.2 as 20 %.
			return t, downstream, fmt.Errorf("--max-reject %q: write the percent sign (%s%% or %g%%): a bare number could mean either", s, s, v*100)
		}
		v /= 100
		t.MaxReject = &v
	}
	if c.IsSet("downstream-max") {
		if downstream, err = policies.ParseRate(c.String("downstream-max")); err != nil {
			return t, downstream, fmt.Errorf("--downstream-max: %w", err)
		}
		t.DownstreamMax = downstream.PerSecond()
	}
	return t, downstream, nil
}

// gridFrom returns the candidates' values the flags ask for, or those
// around policy p (and a total cap of downstream, when not zero).
func gridFrom(c *cli.Context, p policies.Policy, downstream policies.Rate) (replay.Grid, error) {
	g := replay.Grid{Outflows: replay.RatesAround(p.Outflow, 3), Queues: replay.Around(p.Queue, 3), Totals: []policies.Rate{p.Total}}
	if c.IsSet("outflow") {
		g.Outflows = nil
		for _, s := range splitList(c.String("outflow")) {
			r, err := policies.ParseRate(s)
			if err != nil {
				return g, fmt.Errorf("--outflow: %w", err)
			}
			g.Outflows = append(g.Outflows, r)
		}
	}
	if c.IsSet("queue") {
		g.Queues = nil
		for _, s := range splitList(c.String("queue")) {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return g, fmt.Errorf("--queue: %q is not a queue size (a whole number ≥ 1)", s)
			}
			g.Queues = append(g.Queues, n)
		}
	}
	switch {
	case c.IsSet("total"):
		g.Totals = nil
		for _, s := range splitList(c.String("total")) {
			if s == "none" {
				g.Totals = append(g.Totals, policies.Rate{})
				continue
			}
			r, err := policies.ParseRate(s)
			if err != nil {
				return g, fmt.Errorf("--total: %w (or none)", err)
			}
			g.Totals = append(g.Totals, r)
		}
	case !downstream.IsZero() && downstream.PerSecond() != p.Total.PerSecond():
		g.Totals = append(g.Totals, downstream)
	}
	if len(g.Outflows) == 0 || len(g.Queues) == 0 || len(g.Totals) == 0 {
		return g, errors.New("--outflow, --queue and --total need at least one value each")
	}
	if c.IsSet("adapt") {
		var err error
		if g.Adapts, err = adaptsFrom(c.String("adapt"), p); err != nil {
			return g, err
		}
	}
	return g, nil
}

func splitList(s string) []string {
	var out []string
	for f := range strings.SplitSeq(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func runTune(c *cli.Context) error {
	t, err := tuningFrom(c)
	if err != nil {
		return err
	}
	candidates, current, err := t.grid.Candidates(t.set, t.policy)
	if err != nil {
		return cli.Exit("shaper tune: "+err.Error(), 2)
	}
	if c.Bool("apply") {
		// Before the replay: a shaper that is not there, or has no such
		// policy, is said now, not after minutes of work.
		if err := applicable(c, t.set, t.policy); err != nil {
			return err
		}
	}
	src := func() (io.ReadCloser, error) { return os.Open(t.trace) }
	if os.Getenv("GOGC") == "" {
		// A replay's heap is small and bounded by the keys (tens of MB),
		// while the garbage collector took a fifth of its CPU: trade a few
		// times that memory for the time.
		debug.SetGCPercent(400)
	}
	start := time.Now()
	done := 0
	results, err := replay.RunAll(c.Context, candidates, src, replay.Config{
		Parallel:   c.Int("parallel"),
		Series:     c.IsSet("plot"),
		MaxPayload: c.Int("max-payload"),
		Downstream: t.down,
		Done: func(i int, r *replay.Result) {
			done++
			how := "replayed"
			if r.Derived {
				how = "known without a replay"
			}
			fmt.Fprintf(c.App.ErrWriter, "tune: %d/%d %s (%s) after %.1fs\n", done, len(candidates), how, replay.Describe(r.Policy), time.Since(start).Seconds())
		},
	})
	if err != nil {
		return fmt.Errorf("shaper tune: %w", err)
	}
	implicit := holdRejections(&t.targets, &results[current])
	choice := replay.Choose(results, t.targets)
	rep := tuneReport{Trace: t.trace, PolicyFile: c.String("policy-file"), Policy: t.policy, Current: current, Choice: choice,
		Results: results, Targets: t.targets, ImplicitReject: implicit, Down: t.down, Took: time.Since(start)}
	rep.Facts = t.facts
	if c.Bool("json") {
		err = rep.writeJSON(c.App.Writer)
	} else {
		err = rep.write(c.App.Writer)
	}
	if err != nil {
		return err
	}
	if c.IsSet("plot") {
		if err := writePlot(c.String("plot"), &rep); err != nil {
			return fmt.Errorf("shaper tune: --plot: %w", err)
		}
		fmt.Fprintf(c.App.ErrWriter, "tune: plot written to %s\n", c.String("plot"))
	}
	if choice.Best < 0 {
		if rep.hasTargets() {
			return cli.Exit("", 1)
		}
		return nil
	}
	if c.Bool("apply") {
		return applyTuning(c, results[choice.Best].Policy)
	}
	return nil
}

// applicable asks the running shaper for policy name: whether --apply can
// tune it. When what it runs differs from the file's policy in a field tune
// varies (a live override), it says so before the replay: the table's
// current row is the file's, and --apply sets those fields to the
// recommendation's, whatever runs now (a tour's live total cap was
// dropped that way, unannounced).
func applicable(c *cli.Context, set *policies.Set, name string) error {
	api, err := apiClient(c, 10*time.Second)
	if err != nil {
		return err
	}
	live, err := api.Policy(c.Context, name)
	if err != nil {
		return apiError(err, "tune --apply")
	}
	if file, ok := set.Lookup(name); ok {
		if d := tunedDiff(file, live.Policy); d != "" {
			fmt.Fprintf(c.App.ErrWriter, "note: the running shaper's %s differs from the file's in what tune varies (%s): the table's current row is the file's, and --apply sets outflow, queue, total and adapt to the recommendation's\n", name, d)
		}
	}
	return nil
}

// tunedDiff lists the fields tune varies in which b differs from a, as
// "total 500/s → none, adapt key → off", or "".
func tunedDiff(a, b policies.Policy) string {
	var out []string
	for _, ch := range policies.Diff(a, b) {
		if f := ch.Field; f == "outflow" || f == "queue" || f == "total" || f == "adapt" || strings.HasPrefix(f, "adapt.") {
			out = append(out, ch.String())
		}
	}
	return strings.Join(out, ", ")
}

// applyTuning tunes policy p of the running shaper to the values tune
// varies, changing only those that differ from the running ones: a field
// left as it is stays the policy file's, and follows the file's later
// edits.
func applyTuning(c *cli.Context, p policies.Policy) error {
	api, err := apiClient(c, time.Minute)
	if err != nil {
		return err
	}
	running, err := api.Policy(c.Context, p.Name)
	if err != nil {
		return apiError(err, "tune --apply")
	}
	var change client.PolicyChange
	if p.Outflow != running.Outflow {
		change.Outflow = policies.Value(p.Outflow)
	}
	if p.Queue != running.Queue {
		change.Queue = policies.Value(p.Queue)
	}
	if p.Total != running.Total {
		change.Total = policies.Value(p.Total)
	}
	change.Adapt = adaptChange(p.Adapt, running.Adapt)
	if change.IsEmpty() {
		fmt.Fprint(c.App.Writer, "nothing to apply, the shaper runs the recommendation: ")
		showPolicy(c, running, false)
		return nil
	}
	live, err := api.SetPolicy(c.Context, p.Name, change)
	if err != nil {
		return apiError(err, "tune --apply")
	}
	fmt.Fprintf(c.App.Writer, "changed: %s\n", tunedDiff(running.Policy, live.Policy))
	fmt.Fprint(c.App.Writer, "applied: ")
	showPolicy(c, live, false)
	return nil
}
