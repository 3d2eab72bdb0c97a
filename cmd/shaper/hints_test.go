package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper"
)

const hintPolicies = `
policies:
  - name: orders
    outflow: 20/s
    queue: 100
  - name: tenants
    outflow: 50/s
    queue: 1000
    adapt: {per: key, floor: 5/s}
  - name: reports
    outflow: 10/s
    total: 50/s
    queue: 100
    adapt: {per: policy, floor: 5/s, latency: 300ms}
`

// An outflow (or total) under the adapt floor is refused naming both and
// what to change, in a file with its line, live without changing a thing.
func TestOutflowUnderFloor(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("policies:\n  - name: tenants\n    outflow: 1/s\n    queue: 10\n    adapt:\n      floor: 2/s\n"), 0o644)
	_, _, err := runCLI(t, "policies", "check", bad)
	want := `bad.yaml:6: policy "tenants": adapt.floor: 2/s is above outflow 1/s, the ceiling it adapts under: lower adapt.floor to at most 1/s, or raise outflow to at least 2/s`
	if exitCode(err) != exitBadPolicies || err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("check %s = %v, want exit %d saying %q", bad, err, exitBadPolicies, want)
	}

	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, hintPolicies)})
	addr := s.HTTPAddr()
	refused(t, s, []refusal{
		{[]string{"policies", "set", "tenants", "--outflow", "2/s"}, `policy "tenants": adapt.floor: 5/s is above outflow 2/s, the ceiling it adapts under: lower adapt.floor to at most 2/s, or raise outflow to at least 5/s`},
		{[]string{"policies", "set", "reports", "--total", "3/s"}, `policy "reports": adapt.floor: 5/s is above total 3/s, the ceiling it adapts under: lower adapt.floor to at most 3/s, or raise total to at least 5/s`},
		{[]string{"policies", "set", "tenants", "--adapt-floor", "60/s"}, `adapt.floor: 60/s is above outflow 50/s`},
	})
	// Doing what the error says works.
	out, _, err := runCLI(t, "policies", "set", "tenants", "--outflow", "2/s", "--adapt-floor", "2/s", "--http", addr)
	if err != nil || !strings.Contains(out, "tenants: outflow 2/s per key") {
		t.Errorf("policies set tenants --outflow 2/s --adapt-floor 2/s = %q, %v", out, err)
	}
}

// policies check shows an adapt block on the policy's line with every
// field (a default as what it comes to), and policies set shows it in the
// same words: one rendering, whichever command a user runs.
func TestPoliciesCheckAdapt(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(file, []byte(hintPolicies+"  - {name: plain, outflow: 1/s, queue: 1, adapt: on, concurrency: {key: 2}}\n"+
		"  - {name: streamed, outflow: 1/s, queue: 1, deliver: {stream: OUT}}\n  - {name: fire, outflow: 1/s, queue: 1, deliver: {mode: publish}}\n"), 0o644)
	out, _, err := runCLI(t, "policies", "check", file)
	for _, want := range []string{
		"orders: outflow 20/s per key, queue 100, overflow reject, deliver shaper.out.orders.<key>\n",
		"tenants: outflow 50/s per key, queue 1000, overflow reject, adapt per key (floor 5/s, latency target 1.5 × learned baseline), deliver shaper.out.tenants.<key>\n",
		"reports: outflow 10/s per key, queue 100, overflow reject, total 50/s, adapt per policy (floor 5/s, latency target 300ms), deliver shaper.out.reports.<key>\n",
		"plain: outflow 1/s per key, queue 1, overflow reject, adapt per key (default floor 0.1/s, latency target 1.5 × learned baseline), 2 awaiting receipt per key, deliver shaper.out.plain.<key>\n",
		"streamed: outflow 1/s per key, queue 1, overflow reject, deliver shaper.out.streamed.<key> into stream OUT\n",
		"fire: outflow 1/s per key, queue 1, overflow reject, deliver shaper.out.fire.<key> (publish, at most once)\n",
	} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("policies check = %q, %v; want the line %q", out, err, want)
		}
	}

	// The same blocks, set live: the same words, on the policy's line.
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, hintPolicies)})
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"orders", "--adapt", "on"}, ", adapt per key (default floor 2/s, latency target 1.5 × learned baseline), "},
		{[]string{"tenants", "--adapt-tolerance", "2"}, ", adapt per key (floor 5/s, latency target 2 × learned baseline), "},
		{[]string{"reports", "--adapt-floor", "6/s"}, ", adapt per policy (floor 6/s, latency target 300ms), "},
		{[]string{"orders", "--adapt", "off"}, "  adapt: off\n"},
	} {
		out, _, err := runCLI(t, append(append([]string{"policies", "set"}, tc.args...), "--http", s.HTTPAddr())...)
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("policies set %s = %q, %v; want the line %q", strings.Join(tc.args, " "), out, err, tc.want)
		}
	}
}

// Every name a command line or a policy file gets wrong is answered with
// the same hint, by the same rule: policies, fields, flag values, --reset
// fields, commands and flags.
func TestDidYouMean(t *testing.T) {
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, hintPolicies)})
	refused(t, s, []refusal{
		{[]string{"policies", "set", "ordrs", "--outflow", "5/s"}, `unknown policy "ordrs"; known: orders, reports, tenants (did you mean "orders"?)`},
		{[]string{"policies", "reset", "Tenants"}, `unknown policy "Tenants"; known: orders, reports, tenants (did you mean "tenants"?)`},
		{[]string{"policies", "set", "orders", "--adapt", "onn"}, `want on, off or a mapping of per, floor, latency, tolerance (did you mean "on"?)`},
		{[]string{"policies", "set", "orders", "--adapt-per", "polcy"}, `or "policy" (the total adapts) (did you mean "policy"?)`},
		{[]string{"policies", "set", "orders", "--overflow", "rejct"}, `overflow: "rejct": want "reject" or "defer" (did you mean "reject"?)`},
		{[]string{"policies", "set", "orders", "--total", "of"}, `(did you mean "off"?)`},
		{[]string{"policies", "set", "orders", "--reset", "outflw"}, `unknown field "outflw" (did you mean "outflow"?)`},
		{[]string{"policies", "set", "orders", "--reset", "adapt.flor"}, `adapt: unknown field "flor" (did you mean "floor"?)`},
		{[]string{"dead", "list", "--reason", "deadlin"}, `reason "deadlin": want attempts, deadline, delivery or undecodable (did you mean "deadline"?)`},
		{[]string{"policies", "chek"}, `no command "chek"; the commands are get, set, reset, check (did you mean "check"?) (see shaper policies --help)`},
		{[]string{"policies", "set", "orders", "--adapt-flor", "2/s"}, `unknown flag --adapt-flor (did you mean "--adapt-floor"?)`},
	})

	file := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(file, []byte(hintPolicies), 0o644)
	_, _, err := runCLI(t, "tune", "--policy-file", file, "--policy", "tenant", "--trace", file)
	if want := `has no policy "tenant"; it has orders, tenants, reports (did you mean "tenants"?)`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("tune --policy tenant = %v, want an error saying %q", err, want)
	}
	if _, err := adaptsFrom("off,kye", policies.Policy{}); err == nil || !strings.Contains(err.Error(), `"kye": want off, key or policy (did you mean "key"?)`) {
		t.Errorf(`tune --adapt off,kye: %v, want the hint "key"`, err)
	}
}

// refusal is a command line and part of the error it must end in.
type refusal struct {
	args []string
	want string
}

// refused runs each command line against s (those that ask the shaper
// with its --http), checks that it fails as a bad command line (exit 2)
// saying what it must, and that the policies did not change.
func refused(t *testing.T, s *testenv.Running, cases []refusal) {
	t.Helper()
	before := s.Status()
	for _, tc := range cases {
		args := tc.args
		if len(args) > 1 && (args[1] == "set" || args[1] == "reset" || args[0] == "dead") {
			args = append(args[:len(args):len(args)], "--http", s.HTTPAddr())
		}
		_, _, err := runCLI(t, args...)
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s = %v (exit %d), want exit 2 saying %q", strings.Join(tc.args, " "), err, exitCode(err), tc.want)
		}
	}
	for i, p := range s.Status() {
		if policies.Diff(before[i].Policy, p.Policy) != nil || p.Override {
			t.Errorf("refused commands changed %s: %v", p.Name, policies.Diff(before[i].Policy, p.Policy))
		}
	}
}

// A command line a new user gets slightly wrong is refused with exit 2,
// saying what to write instead, before anything runs: a duration without
// its unit, a missing or extra argument, a --reset field nothing is close
// to, a trace that is not one, and "help" works as --help does.
func TestCommandLineMends(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	os.WriteFile(pol, []byte(hintPolicies), 0o644)
	notTrace := filepath.Join(dir, "notes.md")
	os.WriteFile(notTrace, []byte("# notes\n\nnot a trace\n"), 0o644)
	empty := filepath.Join(dir, "empty.csv")
	os.WriteFile(empty, []byte("at,key,size,outcome\n"), 0o644)
	late := filepath.Join(dir, "late.csv")
	os.WriteFile(late, []byte("at,key,size,outcome\n0,a,10,accepted\n1,a,10,accepted\nsoon,a,1,accepted\n"), 0o644)
	tune := []string{"tune", "--policy-file", pol, "--policy", "orders"}
	for _, tc := range []refusal{
		{append(tune, "--trace", empty, "--max-wait", "3"), `shaper tune: invalid value "3" for --max-wait: want a duration such as 500ms, 90s, 5m or 24h (did you mean "3s"?)`},
		{append(tune, "--trace", empty, "--parallel", "two"), `invalid value "two" for --parallel: want a whole number`},
		{append(tune, "--trace", notTrace), `tune: --trace: ` + notTrace + `: not a shaper trace: line 3: header "not a trace"`},
		{append(tune, "--trace", empty), empty + ` holds no submissions: nothing to replay`},
		{append(tune, "--trace", late), late + `: not a shaper trace: line 4: at "soon"`},
		{[]string{"policies", "set", "--outflow", "5/s"}, `shaper policies set: missing NAME; usage: shaper policies set NAME`},
		{[]string{"policies", "set", "orders", "tenants", "--outflow", "5/s"}, `shaper policies set: unexpected argument "tenants" (it takes NAME); usage:`},
		{[]string{"policies", "check"}, `shaper policies check: missing FILE; usage: shaper policies check FILE`},
		{[]string{"dead", "show", "orders"}, `shaper dead show: missing SEQ; usage: shaper dead show POLICY SEQ`},
		{[]string{"dead", "show", "orders", "x"}, `shaper dead show: bad sequence "x": want a positive number`},
		{[]string{"dead", "replay", "orders"}, `shaper dead replay: unexpected argument "orders": it takes none, only flags (did you mean --policy orders?)`},
		{[]string{"status", "orders"}, `shaper status: unexpected argument "orders": it takes none, only flags (see shaper status --help)`},
		{[]string{"status", "--interval", "1s"}, `shaper status: --interval is how often --watch refreshes: give --watch too`},
		{[]string{"serve", "--workers", "0"}, `shaper serve: --workers 0: want at least 1 (deliveries in flight per policy; default 32)`},
		{[]string{"serve", "--workers", "-1"}, `shaper serve: --workers -1: want at least 1`},
		{[]string{"serve", "--max-payload", "-5"}, `shaper serve: --max-payload -5: want at least 1 (bytes)`},
		{[]string{"serve", "--job-ttl", "-1h"}, `shaper serve: --job-ttl -1h0m0s: want a positive duration`},
		{[]string{"serve", "--lease-ttl", "0s"}, `shaper serve: --lease-ttl 0s: want a positive duration`},
		{[]string{"serve", "--replicas", "0"}, `shaper serve: --replicas 0: want 1, 3 or 5`},
		{[]string{"serve", "--replicas", "3"}, `shaper serve: --replicas 3: the embedded JetStream is one node: replicas need a cluster (--nats-url)`},
		{[]string{"dead", "show", "orders", "-1"}, `shaper dead show: -1: a negative number is no argument of shaper dead show (see shaper dead show --help)`},
		{[]string{"dead", "show", "orders", "-x"}, `shaper dead show: unknown flag -x (see shaper dead show --help)`},
		{[]string{"health", "--timeout", "0s"}, `shaper health: --timeout 0s: want a positive duration`},
		{[]string{"tune", "--policy-file", "../../policies.yaml", "--trace", "t.csv"}, `shaper tune: --policy: ../../policies.yaml has 3 policies, say which to tune: orders, emails, reports`},
		{[]string{"health", "--http", "localhost"}, `shaper health: --http "localhost": want HOST:PORT`},
		{[]string{"help", "polices"}, `shaper: no command "polices" to help with; the commands are serve, policies,`},
	} {
		out, _, err := runCLI(t, tc.args...)
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s = %v (exit %d), want exit 2 saying %q", strings.Join(tc.args, " "), err, exitCode(err), tc.want)
		}
		if out != "" {
			t.Errorf("%s printed %q, want nothing on stdout", strings.Join(tc.args, " "), out)
		}
	}
	// No field is close to "bogus": the fields are listed.
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, hintPolicies)})
	refused(t, s, []refusal{
		{[]string{"policies", "set", "orders", "--reset", "bogus"}, `unknown field "bogus"; want one of outflow, queue, overflow, total, retry, admit, adapt, concurrency`},
		{[]string{"policies", "set", "orders", "--reset", "retry.bogus"}, `retry: unknown field "bogus"; want one of attempts, backoff,`},
		// Each problem names its policy, whether this command or the shaper found it.
		{[]string{"policies", "set", "orders", "--outflow", "5"}, `shaper policies set: policy "orders": outflow: rate "5": want N/s, N/m, N/h, N/d or N/<duration> (did you mean "5/s"?)`},
		{[]string{"policies", "set", "orders", "--outflow", "20/sec"}, `shaper policies set: policy "orders": outflow: rate "20/sec": "sec" is not s, m, h, d or a duration (did you mean "20/s"?)`},
		{[]string{"policies", "set", "orders", "--retry-backoff", "5"}, `shaper policies set: policy "orders": retry.backoff: "5": want a duration such as 500ms, 90s, 5m or 24h (did you mean "5s"?)`},
		{[]string{"policies", "set", "orders", "--partitions", "8"}, `shaper policies set: --partitions: partitions cannot change while running: edit the policy file and restart the shapers`},
		{[]string{"policies", "set", "orders", "--queue", "-1"}, `shaper policies set: policy "orders": queue: -1: want a whole number from 1 to`},
		{[]string{"policies", "set", "orders"}, `shaper policies set: nothing to change (give --outflow, --queue, --total, --overflow, a --retry-…, --admit-…, --concurrency-… or --adapt… flag, or --reset FIELD)`},
	})
	// A policy the shaper does not serve, or a value it refuses, is a bad
	// command line, whichever command asks: exit 2, the command named.
	for _, tc := range []refusal{
		{[]string{"policies", "set", "nope", "--outflow", "5/s"}, `shaper policies set: unknown policy "nope"`},
		{[]string{"policies", "reset", "nope"}, `shaper policies reset: unknown policy "nope"`},
		{[]string{"dead", "list", "--policy", "nope"}, `shaper dead list: unknown policy "nope"`},
		{[]string{"dead", "list", "--reason", "bogus"}, `shaper dead list: reason "bogus": want attempts, deadline, delivery or undecodable`},
		{[]string{"dead", "replay", "--policy", "nope"}, `shaper dead replay: unknown policy "nope"`},
		{[]string{"dead", "purge", "--policy", "nope"}, `shaper dead purge: unknown policy "nope"`},
		{[]string{"dead", "show", "nope", "1"}, `shaper dead show: unknown policy "nope"`},
		{[]string{"deferred", "list", "--policy", "nope"}, `shaper deferred list: unknown policy "nope"`},
	} {
		_, _, err := runCLI(t, append(tc.args, "--http", s.HTTPAddr())...)
		if err == nil || exitCode(err) != 2 || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s = %v (exit %d), want exit 2 saying %q", strings.Join(tc.args, " "), err, exitCode(err), tc.want)
		}
	}
	// So is an address no URL holds, and a page no listing has.
	for _, tc := range []refusal{
		{[]string{"status", "--http", "localhost:80x"}, `shaper status: --http "localhost:80x": want HOST:PORT, such as 127.0.0.1:8080`},
		{[]string{"dead", "replay", "--policy", "orders", "--http", "localhost:80x"}, `shaper dead replay: --http "localhost:80x": want HOST:PORT`},
		{[]string{"dead", "list", "--limit", "5000"}, `shaper dead list: --limit 5000: want a number from 1 to 1000`},
		{[]string{"status", "--http", "localhost"}, `shaper status: --http "localhost": want HOST:PORT, such as 127.0.0.1:8080 (no port)`},
		{[]string{"status", "--http", "28082"}, `shaper status: --http "28082": want HOST:PORT, such as 127.0.0.1:8080 (a port alone: did you mean "127.0.0.1:28082"?)`},
		{[]string{"status", "--http", "http://127.0.0.1:8080"}, `shaper status: --http "http://127.0.0.1:8080": want HOST:PORT, such as 127.0.0.1:8080 (no scheme: the address only)`},
		{[]string{"dead", "purge"}, `shaper dead purge: name a --policy, or say --all`},
	} {
		_, _, err := runCLI(t, tc.args...)
		if err == nil || exitCode(err) != 2 || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s = %v (exit %d), want exit 2 saying %q", strings.Join(tc.args, " "), err, exitCode(err), tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"help"}, "COMMANDS:\n   serve"},
		{[]string{"help", "tune"}, "shaper tune - replay a trace"},
		{[]string{"help", "policies"}, "COMMANDS:\n   get "},
		{[]string{"--version"}, "shaper version "},
	} {
		out, _, err := runCLI(t, tc.args...)
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("shaper %s = %v, %q; want the help with %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
}
