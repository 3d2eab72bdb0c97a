package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/traffic"
)

// tuneFiles writes a policy file and a bursty trace of 20 keys over 30 s,
// and returns their paths.
func tuneFiles(t *testing.T) (policyFile, trace string) {
	t.Helper()
	dir := t.TempDir()
	policyFile = filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(policyFile, []byte("policies:\n  - name: orders\n    outflow: 4/s\n    queue: 20\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	trace = filepath.Join(dir, "trace.csv")
	f, err := os.Create(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seq, err := traffic.Synth{Duration: 30 * time.Second, Rate: 40, Keys: 20, Seed: 5,
		Burst: traffic.Burst{Every: 10 * time.Second, For: 3 * time.Second, Rate: 150}}.Records()
	if err != nil {
		t.Fatal(err)
	}
	w := traffic.NewWriter(f)
	for r := range seq {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return policyFile, trace
}

type tuneJSON struct {
	Current     int    `json:"current"`
	Recommended *int   `json:"recommended"`
	Binding     string `json:"binding"`
	Reason      string `json:"reason"`
	YAML        string `json:"yaml"`
	Candidates  []struct {
		Outflow   string  `json:"outflow"`
		Queue     int     `json:"queue"`
		Submitted int     `json:"submitted"`
		Rejected  int     `json:"rejected"`
		WaitP99Ms float64 `json:"wait_p99_ms"`
		Meets     *bool   `json:"meets"`
	} `json:"candidates"`
}

func TestTune(t *testing.T) {
	pf, trace := tuneFiles(t)
	// Several candidates meet the targets: the lowest outflow, then the
	// smallest queue is recommended.
	out, _, err := runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--max-wait", "4s", "--max-reject", "5%", "--json")
	if err != nil {
		t.Fatalf("tune: %v\n%s", err, out)
	}
	var rep tuneJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("tune --json: %v\n%s", err, out)
	}
	if len(rep.Candidates) != 9 || rep.Recommended == nil {
		t.Fatalf("tune: %d candidates, recommended %v; want the 3×3 grid and a recommendation\n%s", len(rep.Candidates), rep.Recommended, out)
	}
	best := rep.Candidates[*rep.Recommended]
	meeting := 0
	for i, c := range rep.Candidates {
		if !*c.Meets {
			continue
		}
		meeting++
		if i < *rep.Recommended {
			t.Errorf("candidate %d (outflow %s, queue %d) meets the targets and comes before the recommended %d (outflow %s, queue %d)",
				i, c.Outflow, c.Queue, *rep.Recommended, best.Outflow, best.Queue)
		}
	}
	if meeting < 2 || !strings.Contains(rep.YAML, "outflow: "+best.Outflow) || rep.Binding == "" {
		t.Errorf("%d candidates meet the targets, YAML %q, binding %q: want several, the recommendation's lines, a binding target", meeting, rep.YAML, rep.Binding)
	}

	// The table and the lines to paste.
	out, _, err = runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--max-wait", "4s", "--max-reject", "5%", "--outflow", "2/s,8/s", "--queue", "10,40")
	if err != nil {
		t.Fatalf("tune: %v\n%s", err, out)
	}
	for _, want := range []string{"wait p99", "current", "best", "recommended: ", "binds", "policy file lines (the fields tune varies; keep the policy's others):\n  - name: orders\n    outflow: 8/s\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("tune's output lacks %q:\n%s", want, out)
		}
	}

	// No candidate meets the targets: exit 1, naming the one that binds.
	out, _, err = runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--max-wait", "100ms", "--max-reject", "0%")
	if exitCode(err) != 1 || !strings.Contains(out, "no recommendation: no candidate meets") {
		t.Errorf("unmeetable targets: exit %d, output:\n%s", exitCode(err), out)
	}
}

// --down replays a downstream that fails every delivery in a window of the
// trace: the table shows the failed attempts, and the waits grow.
func TestTuneDown(t *testing.T) {
	pf, trace := tuneFiles(t)
	type figures struct {
		Accepted, Delivered, Failed, Dead int
		WaitP99Ms                         float64 `json:"wait_p99_ms"`
	}
	tune := func(args ...string) figures {
		t.Helper()
		out, _, err := runCLI(t, append([]string{"tune", "--policy-file", pf, "--trace", trace, "--outflow", "4/s", "--queue", "20", "--json"}, args...)...)
		if err != nil {
			t.Fatalf("tune %q: %v\n%s", args, err, out)
		}
		var rep struct{ Candidates []figures }
		if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Candidates) != 1 {
			t.Fatalf("tune --json: %v\n%s", err, out)
		}
		return rep.Candidates[0]
	}
	up, down := tune(), tune("--down", "0s-5s", "--down", "12s-14s")
	if up.Failed != 0 || down.Failed == 0 || down.Delivered+down.Dead != down.Accepted || down.WaitP99Ms <= up.WaitP99Ms {
		t.Errorf("down 0-5 s and 12-14 s: %+v; always up: %+v; want failed attempts, every accepted job delivered or dead, longer waits", down, up)
	}
	out, _, err := runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--outflow", "4/s", "--queue", "20", "--down", "0s-5s")
	if err != nil || !strings.Contains(out, "fails every delivery in 0s-5s") || !strings.Contains(out, "failed") {
		t.Errorf("tune --down 0s-5s: %v; want the window and a failed column:\n%s", err, out)
	}
}

// --downstream-capacity replays against a simulated downstream, and
// --adapt tries adaptive outflows beside the fixed one: against a
// downstream that slows to a fifth of the outflow, the adaptive per-key
// outflow fails far less.
func TestTuneSimulatedDownstream(t *testing.T) {
	pf, trace := tuneFiles(t)
	args := []string{"tune", "--policy-file", pf, "--trace", trace, "--outflow", "4/s", "--queue", "20", "--adapt", "off,key",
		"--downstream-capacity", "80/s", "--downstream-step", "5s=16/s"}
	out, _, err := runCLI(t, append(args, "--json")...)
	if err != nil {
		t.Fatalf("tune: %v\n%s", err, out)
	}
	var rep struct {
		Candidates []struct {
			Failed int             `json:"failed"`
			Adapt  *policies.Adapt `json:"adapt"`
		} `json:"candidates"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Candidates) != 2 {
		t.Fatalf("tune --json: %v\n%s", err, out)
	}
	fixed, adaptive := rep.Candidates[0], rep.Candidates[1]
	if fixed.Adapt != nil {
		fixed, adaptive = adaptive, fixed
	}
	if adaptive.Adapt == nil || adaptive.Adapt.Per != policies.AdaptPerKey || adaptive.Failed*5 > fixed.Failed {
		t.Errorf("adaptive %+v failed %d attempts, fixed %d: want an adaptive candidate failing far less", adaptive.Adapt, adaptive.Failed, fixed.Failed)
	}
	out, _, err = runCLI(t, args...)
	if err != nil || !strings.Contains(out, "the simulated downstream serves 80/s, 16/s from 5s; latency 20ms, timeout 10s") ||
		!strings.Contains(out, "adapt") || !strings.Contains(out, "failed") {
		t.Errorf("tune with a simulated downstream: %v; want the model, an adapt and a failed column:\n%s", err, out)
	}
	t.Logf("\n%s", out)
}

func TestTunePlot(t *testing.T) {
	pf, trace := tuneFiles(t)
	plot := filepath.Join(t.TempDir(), "tune.svg")
	if _, _, err := runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--max-wait", "4s", "--max-reject", "5%", "--plot", plot); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	for _, want := range []string{"<svg", "Queue depth over the trace", "Time in queue over the trace", "Rejections against wait", "current: outflow 4/s, queue 20", "recommended: outflow", "<polyline", "targets", "</svg>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the plot lacks %q", want)
		}
	}
	if _, _, err := runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--plot", filepath.Join(t.TempDir(), "x.png")); err == nil || !strings.Contains(err.Error(), "svg") {
		t.Errorf("--plot x.png: %v, want an error asking for .svg", err)
	}
}

func TestTuneRefusesBadInput(t *testing.T) {
	pf, trace := tuneFiles(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace", trace, "--max-reject", "200%"}, "--max-reject"},
		{[]string{"--trace", trace, "--max-reject", "0.01"}, `--max-reject "0.01": write the percent sign (0.01% or 1%)`},
		{[]string{"--trace", trace, "--max-wait", "-1s"}, "--max-wait"},
		{[]string{"--trace", trace, "--outflow", "fast"}, "--outflow"},
		{[]string{"--trace", trace, "--queue", "0"}, "--queue"},
		{[]string{"--trace", trace, "--total", "x"}, "--total"},
		{[]string{"--trace", trace, "--downstream-max", "lots"}, "--downstream-max"},
		{[]string{"--trace", trace, "--policy", "nope"}, "no policy"},
		{[]string{"--trace", trace, "--down", "10s"}, "--down \"10s\": not a window; want FROM-TO"},
		{[]string{"--trace", trace, "--down", "0s-10s", "--down", "20s-15s"}, "--down \"20s-15s\": TO must come after FROM"},
		{[]string{"--trace", filepath.Join(t.TempDir(), "missing.csv")}, "--trace"},
		{[]string{"--trace", trace, "--adapt", "tenant"}, `--adapt: "tenant": want off, key or policy`},
		{[]string{"--trace", trace, "--downstream-capacity", "lots"}, "--downstream-capacity"},
		{[]string{"--trace", trace, "--downstream-step", "1m=2/s"}, "need --downstream-capacity"},
		{[]string{"--trace", trace, "--downstream-capacity", "9/s", "--downstream-step", "20s=2/s", "--downstream-step", "10s=3/s"}, `--downstream-step "10s=3/s": want AT=RATE`},
		{[]string{"--trace", trace, "--downstream-capacity", "9/s", "--downstream-step", "1m=x"}, `--downstream-step "1m=x"`},
		{[]string{"--trace", trace, "--parallel", "0"}, "--parallel 0: want at least 1"},
		{[]string{"--trace", trace, "--parallel", "-2"}, "--parallel -2: want at least 1"},
		{[]string{"--trace", trace, "--max-payload", "-1"}, "--max-payload -1: want at least 1"},
		{[]string{"--trace", trace, "--plot", filepath.Join(t.TempDir(), "no", "x.svg")}, "no directory"},
		{[]string{"--trace", trace, "--plot", t.TempDir() + "/"}, "name it *.svg"},
		{[]string{"--trace", trace, "--apply"}, "--apply needs a target"},
		{[]string{"--trace", trace, "--apply", "--max-wait", "4s", "--http", "localhost"}, `--http "localhost": want HOST:PORT`},
	} {
		_, _, err := runCLI(t, append([]string{"tune", "--policy-file", pf}, tc.args...)...)
		if exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tune %q: %v (exit %d), want exit 2 naming %s", tc.args, err, exitCode(err), tc.want)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.csv")
	os.WriteFile(bad, []byte("at,key,size,outcome\n1,a,1,\n0,a,1,\n"), 0o644)
	_, _, err := runCLI(t, "tune", "--policy-file", pf, "--trace", bad)
	if err == nil || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("a trace going back in time: %v, want an error naming line 3", err)
	}
}

// --apply tunes the running shaper to the recommendation.
func TestTuneApply(t *testing.T) {
	pf, trace := tuneFiles(t)
	set := testenv.Policies(t, "policies:\n  - name: orders\n    outflow: 4/s\n    queue: 20\n")
	s := testenv.Shaper(t, shaper.Config{Policies: set, AdminToken: "secret"})
	out, _, err := runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--max-wait", "4s", "--max-reject", "5%",
		"--outflow", "2/s,8/s", "--queue", "10,40", "--apply", "--http", s.HTTPAddr(), "--admin-token", "secret")
	if err != nil {
		t.Fatalf("tune --apply: %v\n%s", err, out)
	}
	api := newAPI(t, s.HTTPAddr())
	p, err := api.Policy(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "changed: outflow 4/s → 8/s") || !strings.Contains(out, "applied: orders: outflow "+p.Outflow.String()) || p.Outflow.String() != "8/s" || !p.Override {
		t.Errorf("after --apply the shaper's policy is %s, queue %d (override %v); output:\n%s", p.Outflow, p.Queue, p.Override, out)
	}
	// Only what differs is overridden: the total (none in both) stays the file's.
	if slices.Contains(p.Overridden, "total") || !slices.Contains(p.Overridden, "outflow") {
		t.Errorf("--apply overrode %v, want the fields that changed only", p.Overridden)
	}
	out, _, err = runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--max-wait", "4s", "--max-reject", "5%",
		"--outflow", "2/s,8/s", "--queue", "10,40", "--apply", "--http", s.HTTPAddr(), "--admin-token", "secret")
	if err != nil || !strings.Contains(out, "nothing to apply") {
		t.Errorf("--apply again: %v, output:\n%s\nwant nothing to apply", err, out)
	}
	// A live total cap the file has not: said before the replay, and its
	// removal said after (a tour's was dropped unannounced).
	if out, _, err := runCLI(t, "policies", "set", "orders", "--total", "500/s", "--http", s.HTTPAddr(), "--admin-token", "secret"); err != nil {
		t.Fatalf("policies set --total: %v\n%s", err, out)
	}
	out, errOut, err := runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--max-wait", "4s", "--max-reject", "5%",
		"--outflow", "2/s,8/s", "--queue", "10,40", "--apply", "--http", s.HTTPAddr(), "--admin-token", "secret")
	if err != nil || !strings.Contains(errOut, "note: the running shaper's orders differs from the file's in what tune varies (outflow 4/s → 8/s, queue 20 → 10, total none → 500/s)") ||
		!strings.Contains(out, "changed: total 500/s → none") {
		t.Errorf("--apply over a live total: %v, stderr:\n%s\nstdout:\n%s\nwant a note before and the total's removal after", err, errOut, out)
	}
	_, _, err = runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--max-reject", "100%", "--outflow", "2/s", "--queue", "10", "--apply", "--http", s.HTTPAddr())
	if err == nil || !strings.Contains(err.Error(), "admin-token") {
		t.Errorf("--apply without the admin token: %v, want a 401 naming --admin-token", err)
	}
	// What --apply cannot do is said before the replay, not after it.
	gone := freeAddr(t)
	for _, tc := range []struct {
		http, policy string
		code         int
		want         string
	}{
		{s.HTTPAddr(), "nope", 2, `unknown policy "nope"; known: orders`},
		{gone, "orders", 1, "is the shaper running?"},
	} {
		pf2 := filepath.Join(t.TempDir(), "p.yaml")
		os.WriteFile(pf2, []byte("policies:\n  - name: "+tc.policy+"\n    outflow: 4/s\n    queue: 20\n"), 0o644)
		_, errOut, err := runCLI(t, "tune", "--policy-file", pf2, "--trace", trace, "--max-wait", "4s", "--apply", "--http", tc.http, "--admin-token", "secret")
		if exitCode(err) != tc.code || !strings.Contains(err.Error(), tc.want) || strings.Contains(errOut, "replayed") {
			t.Errorf("tune --apply --http %s, policy %s: %v (exit %d), stderr %q; want exit %d naming %q before any replay",
				tc.http, tc.policy, err, exitCode(err), errOut, tc.code, tc.want)
		}
	}
}

// With a wait target but no --max-reject, a recommendation rejects no more
// than the policy as it is: the smaller queue that meets the wait only by
// refusing more is not recommended, and the report says why.
func TestTuneHoldsRejectionsWithoutTarget(t *testing.T) {
	pf, trace := tuneFiles(t)
	args := []string{"tune", "--policy-file", pf, "--trace", trace, "--max-wait", "1h", "--outflow", "4/s", "--queue", "2,20"}
	out, _, err := runCLI(t, append(args, "--json")...)
	if err != nil {
		t.Fatalf("tune: %v\n%s", err, out)
	}
	var rep tuneJSON
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	rejected := map[int]int{}
	for _, c := range rep.Candidates {
		rejected[c.Queue] = c.Rejected
	}
	if rejected[2] <= rejected[20] {
		t.Fatalf("queue 2 rejects %d, queue 20 %d: the trace does not tell the two apart", rejected[2], rejected[20])
	}
	if rep.Recommended == nil || rep.Candidates[*rep.Recommended].Queue != 20 {
		t.Errorf("recommended %v, want queue 20 (queue 2 rejects %d more)\n%s", rep.Recommended, rejected[2]-rejected[20], out)
	}
	if !strings.Contains(out, `"max_reject_held"`) {
		t.Errorf("the JSON report does not say the rejections were held:\n%s", out)
	}
	out, _, err = runCLI(t, args...)
	if err != nil || !strings.Contains(out, "no --max-reject given: candidates may reject no more than the policy as it is") {
		t.Errorf("tune = %v\n%s\nwant a line saying the rejections were held to the policy's", err, out)
	}
	// An explicit --max-reject is the bound asked for: queue 2 may win.
	out, _, err = runCLI(t, append(args, "--max-reject", "100%", "--json")...)
	if err != nil || json.Unmarshal([]byte(out), &rep) != nil || rep.Recommended == nil || rep.Candidates[*rep.Recommended].Queue != 2 {
		t.Errorf("with --max-reject 100%%: %v, want queue 2 recommended\n%s", err, out)
	}
}

// The lines to paste say to remove a field the recommendation drops (pasted
// over the policy's lines, they would keep it), and a policy drained in
// partitions is said to be replayed in them.
func TestTuneSaysWhatTheLinesDrop(t *testing.T) {
	total := policies.Rate{N: 120, Per: time.Second}
	current := policies.Policy{Name: "orders", Outflow: policies.Rate{N: 4, Per: time.Second}, Queue: 20, Total: total, Adapt: &policies.Adapt{Per: "key", Tolerance: 1.5}}
	best := policies.Policy{Name: "orders", Outflow: policies.Rate{N: 8, Per: time.Second}, Queue: 40}
	got := policyYAML(best, current)
	for _, want := range []string{"    outflow: 8/s\n    queue: 40\n", "    # no total: remove the policy's total line (total: 120/s)\n", "    # no adapt: remove the policy's adapt block\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("policyYAML(no total, no adapt) = %q, lacks %q", got, want)
		}
	}
	if got := policyYAML(current, current); strings.Contains(got, "#") || !strings.Contains(got, "    total: 120/s\n") {
		t.Errorf("policyYAML(the policy itself) = %q, want its total and no comment", got)
	}

	pf, trace := tuneFiles(t)
	if err := os.WriteFile(pf, []byte("policies:\n  - name: orders\n    outflow: 4/s\n    queue: 20\n    total: 60/s\n    partitions: 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--outflow", "4/s", "--queue", "20")
	if err != nil {
		t.Fatalf("tune: %v\n%s", err, out)
	}
	if !strings.Contains(out, "replayed in the policy's 4 partitions, as the shapers drain it: a total cap is split into 4 equal shares (total/4 each)") {
		t.Errorf("tune of a policy in 4 partitions does not say so:\n%s", out)
	}
	// Among candidates with and without a total, the recommendation says
	// which it is: "outflow 4/s, queue 20" alone reads as the current one.
	out, _, err = runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--outflow", "4/s", "--queue", "20", "--total", "none,60/s", "--max-reject", "5%")
	if err != nil || !strings.Contains(out, "recommended: outflow 4/s, queue 20, no total is the cheapest candidate") {
		t.Errorf("tune recommending no total among totals: %v, does not say no total:\n%s", err, out)
	}
}

// What every candidate refuses alike (the admission limit, invalid jobs)
// is not in the rejected column nor in --max-reject: the report says how
// much of the trace it is. A tour read "rejected 0%, meets yes" of a trace
// whose admission limit refused 77 % of it.
func TestTuneSaysWhatNoCandidateTakes(t *testing.T) {
	pf, trace := tuneFiles(t)
	if err := os.WriteFile(pf, []byte("policies:\n  - name: orders\n    outflow: 4/s\n    queue: 20\n    admit: {algorithm: fixed_window, limit: 10/m}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--outflow", "4/s", "--queue", "20")
	if err != nil {
		t.Fatalf("tune: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`refused under every candidate, and not in the table's rejected column \(full keys\) nor in --max-reject: \d+ \([\d.]+ ?%\) by the admission limit \(admit: 10/m\); tune varies outflow, queue, total and adapt, not these`).MatchString(out) {
		t.Errorf("tune of a policy whose admission limit refuses most of the trace does not say so:\n%s", out)
	}
}

// A trace whose times look written in another unit than seconds since its
// start is replayed, with a note saying so before the replay: a tour's
// trace in milliseconds replayed as 166 hours, and one of Unix times as
// 472,222 hours, and the cheapest candidate was recommended for each.
func TestTuneNotesTraceUnits(t *testing.T) {
	pf, _ := tuneFiles(t)
	dir := t.TempDir()
	var ms, unix strings.Builder
	ms.WriteString("at,key,size,outcome\n")
	unix.WriteString("at,key,size,outcome\n")
	for i := range 100 {
		fmt.Fprintf(&ms, "%d.5,k%d,10,accepted\n", i*1000, i%3) // a 1 s trace written in ms
		fmt.Fprintf(&unix, "%d.25,k%d,10,accepted\n", 1700000000+i, i%3)
	}
	for name, tc := range map[string]struct{ trace, want string }{
		"ms":   {ms.String(), "note: the trace spans 27h30m0s for 100 submissions (0.001 a second): `at` is in seconds; a trace written in milliseconds is 1000 times too long"},
		"unix": {unix.String(), "note: the trace's first submission is at 1700000000 s: `at` is seconds since the trace's start, not a Unix time"},
	} {
		trace := filepath.Join(dir, name+".csv")
		if err := os.WriteFile(trace, []byte(tc.trace), 0o644); err != nil {
			t.Fatal(err)
		}
		_, errOut, err := runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--outflow", "4/s", "--queue", "20")
		if err != nil || !strings.Contains(errOut, tc.want) {
			t.Errorf("tune of a trace in %s: %v, stderr:\n%s\nwant %q", name, err, errOut, tc.want)
		}
	}
	// A trace in seconds says nothing of the kind.
	_, trace := tuneFiles(t)
	if _, errOut, _ := runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--outflow", "4/s", "--queue", "20"); strings.Contains(errOut, "note: the trace") {
		t.Errorf("tune of a trace in seconds notes its units:\n%s", errOut)
	}
}
