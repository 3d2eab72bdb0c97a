package main

import (
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

// policies set changes exactly the fields its flags name; --reset takes a
// field back to the file's.
func TestPoliciesSetFields(t *testing.T) {
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, `
policies:
  - name: p
    outflow: 5/s
    queue: 3
    total: 50/s
    retry: {attempts: 5, backoff: 7s, deadline: 2h, budget: off}
    admit: {algorithm: gcra, limit: 10/s}
    adapt: on
`)})
	addr := s.HTTPAddr()
	api := newAPI(t, addr)
	policy := func() client.Policy {
		t.Helper()
		p, err := api.Policy(t.Context(), "p")
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := policy()

	out, _, err := runCLI(t, "policies", "set", "p", "--retry-attempts", "3", "--retry-max-backoff", "2m", "--http", addr)
	if err != nil || !strings.Contains(out, "(live override: retry.attempts, retry.max_backoff)") ||
		!strings.Contains(out, "retry: attempts 3, backoff 7s, max_backoff 2m0s, deadline 2h0m0s, budget off") {
		t.Errorf("policies set --retry-attempts 3 --retry-max-backoff 2m = %q, %v", out, err)
	}
	want := file.Policy
	want.Retry.Attempts, want.Retry.MaxBackoff = 3, 2*time.Minute
	if got := policy(); policies.Diff(want, got.Policy) != nil {
		t.Errorf("after set: %v, want only attempts and max_backoff changed", policies.Diff(file.Policy, got.Policy))
	}

	out, _, err = runCLI(t, "policies", "set", "p", "--total", "off", "--admit", "off", "--reset", "retry.attempts", "--http", addr)
	if err != nil || !strings.Contains(out, "(live override: total, retry.max_backoff, admit)") || !strings.Contains(out, "admit: off") {
		t.Errorf("policies set --total off --admit off --reset retry.attempts = %q, %v", out, err)
	}
	want.Retry.Attempts, want.Total, want.Admit = 5, policies.Rate{}, nil
	if got := policy(); policies.Diff(want, got.Policy) != nil {
		t.Errorf("after the second set: %v from what was asked", policies.Diff(want, got.Policy))
	}

	out, _, err = runCLI(t, "policies", "set", "p", "--reset", "total,admit", "--reset", "retry", "--http", addr)
	if got := policy(); err != nil || policies.Diff(file.Policy, got.Policy) != nil || got.Override || strings.Contains(out, "override") {
		t.Errorf("policies set --reset total,admit --reset retry = %q, %v: %v from the file", out, err, policies.Diff(file.Policy, got.Policy))
	}

	out, _, err = runCLI(t, "policies", "set", "p", "--adapt-floor", "2/s", "--adapt-tolerance", "2", "--http", addr)
	if err != nil || !strings.Contains(out, "(live override: adapt.floor, adapt.tolerance)") ||
		!strings.Contains(out, ", adapt per key (floor 2/s, latency target 2 × learned baseline), ") {
		t.Errorf("policies set --adapt-floor 2/s --adapt-tolerance 2 = %q, %v", out, err)
	}
	if got := policy(); got.Adapt == nil || *got.Adapt != (policies.Adapt{Per: policies.AdaptPerKey, Floor: policies.Rate{N: 2, Per: time.Second}, Tolerance: 2}) {
		t.Errorf("after --adapt-floor 2/s --adapt-tolerance 2: adapt %+v", got.Adapt)
	}
	out, _, err = runCLI(t, "policies", "set", "p", "--adapt", "off", "--http", addr)
	if got := policy(); err != nil || got.Adapt != nil || !strings.Contains(out, "adapt: off") {
		t.Errorf("policies set --adapt off = %q, %v; adapt %+v", out, err, got.Adapt)
	}
	// --adapt on with adapt's fields: the fields turn it on, as alone.
	out, _, err = runCLI(t, "policies", "set", "p", "--adapt", "on", "--adapt-floor", "3/s", "--http", addr)
	if got := policy(); err != nil || got.Adapt == nil || got.Adapt.Floor != (policies.Rate{N: 3, Per: time.Second}) {
		t.Errorf("policies set --adapt on --adapt-floor 3/s = %q, %v; adapt %+v", out, err, got.Adapt)
	}
	if _, _, err = runCLI(t, "policies", "set", "p", "--reset", "adapt", "--http", addr); err != nil || policy().Override {
		t.Errorf("policies set --reset adapt = %v, override %v; want the file's policy", err, policy().Override)
	}
	out, _, err = runCLI(t, "policies", "set", "p", "--concurrency-key", "2", "--concurrency-total", "4", "--http", addr)
	if err != nil || !strings.Contains(out, ", 2 awaiting receipt per key (4 in all), ") {
		t.Errorf("policies set --concurrency-key 2 --concurrency-total 4 = %q, %v", out, err)
	}
	if got := policy(); got.Concurrency != (policies.Concurrency{Key: 2, Total: 4}) {
		t.Errorf("after set: concurrency %+v, want key 2, total 4", got.Concurrency)
	}
	out, _, err = runCLI(t, "policies", "set", "p", "--reset", "concurrency", "--http", addr)
	if got := policy(); err != nil || policies.Diff(file.Policy, got.Policy) != nil || got.Override {
		t.Errorf("policies set --reset concurrency = %q, %v: %v from the file", out, err, policies.Diff(file.Policy, got.Policy))
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--concurrency-key", "0"}, "concurrency.key: 0: want a whole number from 1 to 10000"},
		{[]string{"--concurrency-key", "3", "--concurrency-total", "2"}, "concurrency.key: 3: more than concurrency.total (2)"},
		{[]string{"--reset", "retry.bakoff"}, `retry: unknown field "bakoff" (did you mean "backoff"?)`},
		{[]string{"--retry-backoff", "7x"}, `retry.backoff: "7x": want a duration`},
		{[]string{"--retry-budget", "120%"}, `retry.budget: "120%"`},
		{[]string{"--admit", "on"}, `admit: "on": want off or a mapping`},
		{[]string{"--adapt", "maybe"}, `adapt: "maybe": want on, off or a mapping`},
		{[]string{"--adapt-per", "tenant"}, `adapt.per: "tenant": want "key"`},
		{[]string{"--adapt", "off", "--adapt-floor", "1/s"}, "--adapt-floor: adapt is off by another flag, which leaves none of its fields to change"},
		{[]string{"--adapt-floor", "100/s"}, "adapt.floor: 100/s is above outflow 5/s"}, // the shaper refuses it
		{[]string{"--reset", "retry", "--retry-attempts", "2"}, "--reset: retry is already changed by another flag"},
		{[]string{"--reset", "queue", "--queue", "2"}, "--reset: queue is already changed by another flag"},
		{[]string{"--reset", "retry", "--reset", "retry.backoff"}, "--reset: retry is reset: it cannot be changed too"},
		{[]string{"--retry-backoff", "5m"}, "retry.backoff: 5m0s is more than max_backoff"}, // the shaper refuses it
	} {
		_, _, err := runCLI(t, append([]string{"policies", "set", "p", "--http", addr}, bad.args...)...)
		if err == nil || !strings.Contains(err.Error(), bad.want) || exitCode(err) != 2 {
			t.Errorf("policies set %s = %v (exit %d), want an error containing %q, exit 2, whether the command or the shaper refused it",
				strings.Join(bad.args, " "), err, exitCode(err), bad.want)
		}
	}
	if got := policy(); policies.Diff(file.Policy, got.Policy) != nil || got.Override {
		t.Errorf("refused sets changed %v", policies.Diff(file.Policy, got.Policy))
	}
}

// Some --admit-… fields of a policy with no admission limit: the flags a
// new limit needs are named, and nothing changes; with both, it is added.
func TestPoliciesSetNewAdmitNeedsItsFlags(t *testing.T) {
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, "policies:\n  - name: p\n    outflow: 5/s\n    queue: 3\n")})
	addr := s.HTTPAddr()
	for _, tc := range []struct {
		flags   []string
		missing string
	}{
		{[]string{"--admit-fail", "closed"}, "--admit-algorithm and --admit-limit"},
		{[]string{"--admit-algorithm", "gcra"}, "--admit-limit"},
		{[]string{"--admit-limit", "10/s", "--admit-burst", "4"}, "--admit-algorithm"},
	} {
		_, _, err := runCLI(t, append([]string{"policies", "set", "p", "--http", addr}, tc.flags...)...)
		want := `policy "p" has no admission limit to change: a new one needs --admit-algorithm and --admit-limit (missing: ` + tc.missing + ")"
		if exitCode(err) != 2 || !strings.Contains(err.Error(), want) {
			t.Errorf("policies set %q: %v (exit %d), want exit 2 saying %q", tc.flags, err, exitCode(err), want)
		}
	}
	if p, err := newAPI(t, addr).Policy(t.Context(), "p"); err != nil || p.Admit != nil || p.Override {
		t.Fatalf("after refused changes: admit %v, override %v, %v; want no change", p.Admit, p.Override, err)
	}
	out, _, err := runCLI(t, "policies", "set", "p", "--http", addr, "--admit-algorithm", "gcra", "--admit-limit", "10/s", "--admit-fail", "closed")
	if err != nil || !strings.Contains(out, "admit: gcra 10/s, burst 0, shadow false, fail closed") {
		t.Errorf("policies set with a new admission limit: %v\n%s", err, out)
	}
	// Once it has one, a field alone changes it.
	out, _, err = runCLI(t, "policies", "set", "p", "--http", addr, "--admit-fail", "open")
	if err != nil || !strings.Contains(out, "fail open") {
		t.Errorf("policies set --admit-fail open: %v\n%s", err, out)
	}
}

// policies get shows one running policy, or all, with their live changes;
// what it, policies set and tune --apply print of a policy drained in
// partitions says how many (its total is split among them).
func TestPoliciesGet(t *testing.T) {
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, "policies:\n  - {name: a, outflow: 5/s, queue: 3}\n  - {name: b, outflow: 1/s, queue: 9}\n"+
		"  - {name: c, outflow: 1/s, queue: 9, adapt: on, concurrency: {key: 2}, admit: {algorithm: gcra, limit: 10/s}, deliver: {webhook: 'http://127.0.0.1:9/h'}}\n"+
		"  - {name: p, outflow: 5/s, queue: 3, total: 40/s, partitions: 4}\n")})
	out, _, err := runCLI(t, "policies", "set", "p", "--queue", "6", "--http", s.HTTPAddr())
	if err != nil || !strings.Contains(out, "p: outflow 5/s per key, queue 6, overflow reject, total 40/s, 4 partitions, deliver shaper.out.p.<key> (live override: queue)") {
		t.Errorf("policies set p --queue 6 = %q, %v; want the policy's 4 partitions said", out, err)
	}
	if _, _, err := runCLI(t, "policies", "set", "a", "--queue", "4", "--http", s.HTTPAddr()); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCLI(t, "policies", "get", "a", "--http", s.HTTPAddr())
	if err != nil || out != "a: outflow 5/s per key, queue 4, overflow reject, deliver shaper.out.a.<key> (live override: queue)\n  retry: attempts 10, backoff 1s, max_backoff 1m0s, deadline 24h0m0s, budget 20%\n" {
		t.Errorf("policies get a = %q, %v", out, err)
	}
	out, _, err = runCLI(t, "policies", "get", "--http", s.HTTPAddr())
	if err != nil || !strings.Contains(out, "a: outflow 5/s per key, queue 4") || !strings.Contains(out, "b: outflow 1/s per key, queue 9, overflow reject, deliver shaper.out.b.<key>\n") {
		t.Errorf("policies get = %q, %v; want both", out, err)
	}
	// What the file sets shows too, not only what an override changed.
	out, _, err = runCLI(t, "policies", "get", "c", "--http", s.HTTPAddr())
	for _, want := range []string{", adapt per key (", ", 2 awaiting receipt per key, webhook http://127.0.0.1:9/h\n", "\n  admit: gcra 10/s, burst 0"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("policies get c = %q, %v; want %q", out, err, want)
		}
	}
	if _, _, err := runCLI(t, "policies", "get", "nope", "--http", s.HTTPAddr()); err == nil || !strings.Contains(err.Error(), `unknown policy "nope"`) {
		t.Errorf("policies get nope: %v, want the unknown policy named", err)
	}
}
