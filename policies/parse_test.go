package policies

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// defaults returns a policy as Parse makes it from just name, outflow and queue.
func defaults(name string, outflow Rate, queue, line int) Policy {
	return Policy{
		Name:     name,
		Outflow:  outflow,
		Queue:    queue,
		Overflow: DefaultOverflow,
		Deliver:  Deliver{Subject: DefaultDeliverPrefix + "." + name, Mode: DeliverConfirm, Timeout: DefaultWebhookTimeout},
		Retry: Retry{
			Attempts:   DefaultRetryAttempts,
			Backoff:    DefaultRetryBackoff,
			MaxBackoff: DefaultRetryMaxBackoff,
			Deadline:   DefaultRetryDeadline,
			Budget:     DefaultRetryBudget,
		},
		Concurrency: Concurrency{Key: DefaultConcurrencyKey},
		Line:        line,
	}
}

func TestParse(t *testing.T) {
	perSec := func(n float64) Rate { return Rate{n, time.Second} }
	tests := []struct {
		name string
		in   string
		want func() []Policy
	}{
		{"minimal", `
policies:
  - name: orders
    outflow: 20/s
    queue: 100
`, func() []Policy { return []Policy{defaults("orders", perSec(20), 100, 3)} }},
		{"everything", `
policies:
  - name: orders
    outflow: 20/s
    queue: 1_000_000
    overflow: defer
    total: 500/s
    deliver:
      subject: out.orders
      stream: ORDERS_OUT
      confirm: true
      timeout: 5s
    retry: {attempts: 5, backoff: 1s, max_backoff: 1m, deadline: 1h, budget: 12.5%}
    admit:
      algorithm: token_bucket
      limit: 600/m
      burst: 10
      shadow: true
      fail: closed
`, func() []Policy {
			p := defaults("orders", perSec(20), 1_000_000, 3)
			p.Overflow = OverflowDefer
			p.Total = perSec(500)
			p.Deliver = Deliver{Subject: "out.orders", Stream: "ORDERS_OUT", Timeout: 5 * time.Second}
			p.Retry = Retry{Attempts: 5, Backoff: time.Second, MaxBackoff: time.Minute, Deadline: time.Hour, Budget: 0.125}
			p.Admit = &Admit{Algorithm: "token_bucket", Limit: Rate{600, time.Minute}, Burst: 10, Shadow: true, Fail: "closed"}
			return []Policy{p}
		}},
		{"deliver string, webhook, partial retry, default fail", `
policies:
  - name: a
    outflow: 1/s
    queue: 1
    deliver: x.y
  - name: B-2_c
    outflow: 5/10s
    queue: 2
    deliver: {webhook: "https://example.com:8443/hook?x=1"}
    retry:
      backoff: 30s
    admit: {algorithm: sliding_window, limit: 100/m}
`, func() []Policy {
			a := defaults("a", perSec(1), 1, 3)
			a.Deliver.Subject = "x.y"
			b := defaults("B-2_c", Rate{5, 10 * time.Second}, 2, 7)
			b.Deliver = Deliver{Webhook: "https://example.com:8443/hook?x=1", Timeout: DefaultWebhookTimeout}
			b.Retry.Backoff = 30 * time.Second
			b.Admit = &Admit{Algorithm: "sliding_window", Limit: Rate{100, time.Minute}, Fail: DefaultAdmitFail}
			return []Policy{a, b}
		}},
		{"nulls mean left out", `
policies:
  - name: a
    outflow: 1/s
    queue: 1
    overflow:
    total: ~
    deliver:
    retry: {attempts: null}
    admit:
`, func() []Policy { return []Policy{defaults("a", perSec(1), 1, 3)} }},
		{"flow style and aliases", `
base: &base {outflow: 1/s, queue: 3}
policies: [{name: a, outflow: 2/s, queue: 3}, &b {name: b, outflow: 1/m, queue: 4}]
`, nil}, // the unknown "base" field makes this one fail; see TestParseErrors
		{"comments and a trailing empty document", `
# policies for tests
policies:
  # the only one
  - name: a   # trailing comment
    outflow: 1/s
    queue: 1
---
`, func() []Policy { return []Policy{defaults("a", perSec(1), 1, 5)} }},
		{"windowed with a whole N and a zero burst", `
policies:
  - name: a
    outflow: 1/s
    queue: 1
    admit: {algorithm: fixed_window, limit: 10/s, burst: 0}
`, func() []Policy {
			p := defaults("a", perSec(1), 1, 3)
			p.Admit = &Admit{Algorithm: "fixed_window", Limit: perSec(10), Fail: DefaultAdmitFail}
			return []Policy{p}
		}},
	}
	for _, tt := range tests {
		if tt.want == nil {
			continue
		}
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse("policies.yaml", []byte(tt.in))
			if err != nil {
				t.Fatalf("Parse error: %v", err)
			}
			got, want := set.Policies(), tt.want()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Parse =\n%+v\nwant\n%+v", got, want)
			}
			for _, p := range got {
				if err := p.Validate(); err != nil {
					t.Errorf("Parse returned policy %q that does not validate: %v", p.Name, err)
				}
				if q, ok := set.Lookup(p.Name); !ok || !reflect.DeepEqual(q, p) {
					t.Errorf("Lookup(%q) = %+v, %v, want %+v, true", p.Name, q, ok, p)
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	const head = "policies:\n  - name: orders\n    outflow: 20/s\n    queue: 100\n" // lines 1-4
	tests := []struct {
		name  string
		in    string
		line  int
		field string
		want  string // part of the message of the first error
	}{
		{"empty", "", 0, "", "empty file"},
		{"comments only", "# nothing\n", 0, "", "empty file"},
		{"no policies", "policies:\n", 1, "", "no policies"},
		{"empty list", "policies: []\n", 1, "", "no policies"},
		{"not a mapping", "- a\n- b\n", 1, "", `want a "policies:" list`},
		{"policies not a list", "policies: orders\n", 1, "", "want a list of policies"},
		{"top-level typo", "\npolicy:\n  - name: a\n", 2, "", `unknown field "policy" (did you mean "policies"?)`},
		{"item not a mapping", "policies:\n  - orders\n", 2, "", "want a policy"},
		{"outflow fast", "policies:\n  - name: orders\n    outflow: fast\n    queue: 100\n", 3, "outflow",
			`rate "fast": want N/s, N/m, N/h, N/d or N/<duration>`},
		{"outflow zero", "policies:\n  - name: orders\n    queue: 100\n    outflow: 0/s\n", 4, "outflow", "not a positive number"},
		{"outflow missing", "policies:\n  - name: orders\n    queue: 100\n", 2, "outflow", "missing"},
		{"outflow a list", "policies:\n  - name: orders\n    queue: 100\n    outflow: [1]\n", 4, "outflow", "a list: want a string"},
		{"name missing", "policies:\n  - outflow: 1/s\n    queue: 100\n", 2, "name", "missing"},
		{"name bad", "policies:\n  - queue: 1\n    outflow: 1/s\n    name: a.b\n", 4, "name", "want only letters"},
		{"name too long", "policies:\n  - queue: 1\n    outflow: 1/s\n    name: " + strings.Repeat("a", 65) + "\n", 4, "name", "more than 64"},
		{"queue zero", head[:len(head)-len("    queue: 100\n")] + "    queue: 0\n", 4, "queue", "0: want a whole number from 1 to 1000000"},
		{"queue too big", head[:len(head)-len("    queue: 100\n")] + "    queue: 1000001\n", 4, "queue", "from 1 to 1000000"},
		{"queue text", head[:len(head)-len("    queue: 100\n")] + "    queue: lots\n", 4, "queue", `"lots": want a whole number`},
		{"queue float", head[:len(head)-len("    queue: 100\n")] + "    queue: 1.5\n", 4, "queue", "want a whole number"},
		{"queue huge", head[:len(head)-len("    queue: 100\n")] + "    queue: 99999999999999999999\n", 4, "queue", "want a whole number"},
		{"overflow", head + "    overflow: drop\n", 5, "overflow", `"drop": want "reject" or "defer"`},
		{"overflow typo", head + "    overflow: rejct\n", 5, "overflow", `"rejct": want "reject" or "defer" (did you mean "reject"?)`},
		{"overflow empty", head + "    overflow: ''\n", 5, "overflow", `"": want "reject" or "defer"`},
		{"total", head + "    total: 0.5\n", 5, "total", "want N/s"},
		{"total typo", head + "    total: of\n", 5, "total", `(did you mean "off"?)`},
		{"unknown field", head + "    outfow: 1/s\n", 5, "", `unknown field "outfow" (did you mean "outflow"?)`},
		{"unknown field far", head + "    colour: red\n", 5, "", `unknown field "colour"`},
		{"field twice", head + "    queue: 5\n", 5, "queue", "given twice (first on line 4)"},
		{"duplicate name", head + "  - name: orders\n    outflow: 1/s\n    queue: 1\n", 5, "name", `"orders" is already defined on line 2`},
		{"name differs in case", head + "  - name: Orders\n    outflow: 1/s\n    queue: 1\n", 5, "name", `differs only in case from "orders" on line 2`},
		{"deliver wildcard", head + "    deliver: out.*\n", 5, "deliver.subject", "wildcards are not allowed"},
		{"deliver full wildcard", head + "    deliver:\n      subject: out.>\n", 6, "deliver.subject", "wildcards"},
		{"deliver empty token", head + "    deliver: out..x\n", 5, "deliver.subject", "empty token"},
		{"deliver to submissions", head + "    deliver: shaper.submit.orders\n", 5, "deliver.subject", "the shaper's own subjects (shaper.submit.>) are not for deliveries"},
		{"deliver into a queue", head + "    deliver: shaper.q.orders\n", 5, "deliver.subject", "(shaper.q.>)"},
		{"deliver into job records", head + "    deliver: shaper.jobs.x\n", 5, "deliver.subject", "(shaper.jobs.>)"},
		{"deliver above the shaper's", head + "    deliver: shaper\n", 5, "deliver.subject", "the shaper's own subjects"},
		{"deliver to JetStream's API", head + "    deliver: $JS.API\n", 5, "deliver.subject", "subjects starting with $ or _"},
		{"deliver to inboxes", head + "    deliver: _INBOX.x\n", 5, "deliver.subject", "subjects starting with $ or _"},
		{"deliver as another policy", head + "  - {name: other, outflow: 1/s, queue: 1, deliver: shaper.out.orders}\n", 5, "deliver.subject", `"shaper.out.orders" overlaps policy "orders"'s "shaper.out.orders" (line 2)`},
		{"deliver under another policy's", head + "  - {name: other, outflow: 1/s, queue: 1, deliver: shaper.out.orders.vip}\n", 5, "deliver.subject", `overlaps policy "orders"'s`},
		{"deliver trailing dot", head + "    deliver: {subject: out.}\n", 5, "deliver.subject", "empty token"},
		{"deliver space", head + "    deliver: 'out x'\n", 5, "deliver.subject", "spaces"},
		{"deliver empty", head + "    deliver:\n      subject: ''\n", 6, "deliver.subject", "missing"},
		{"deliver list", head + "    deliver: [a]\n", 5, "deliver", "want a NATS subject or a mapping"},
		{"deliver unknown", head + "    deliver:\n      url: http://x\n", 6, "deliver", `unknown field "url"`},
		{"stream dot", head + "    deliver:\n      stream: A.B\n", 6, "deliver.stream", "may not contain"},
		{"stream space", head + "    deliver:\n      stream: 'A B'\n", 6, "deliver.stream", "may not contain"},
		{"mode unknown", head + "    deliver:\n      mode: fire\n", 6, "deliver.mode", `"fire": want "confirm"`},
		{"mode typo", head + "    deliver:\n      mode: publsh\n", 6, "deliver.mode", `(at most once) (did you mean "publish"?)`},
		{"mode and confirm", head + "    deliver:\n      mode: publish\n      confirm: true\n", 7, "deliver.confirm", "give mode or confirm, not both"},
		{"publish into a stream", head + "    deliver:\n      stream: S\n      mode: publish\n", 7, "deliver.mode", "a stream delivery waits"},
		{"webhook and mode", head + "    deliver:\n      webhook: http://x/\n      mode: confirm\n", 6, "deliver.webhook", "a webhook excludes mode"},
		{"confirm yes", head + "    deliver:\n      confirm: yes\n", 6, "deliver.confirm", `"yes": want true or false`},
		{"webhook scheme", head + "    deliver:\n      webhook: ftp://x/y\n", 6, "deliver.webhook", "want an http:// or https:// URL"},
		{"webhook no host", head + "    deliver:\n      webhook: 'http:///x'\n", 6, "deliver.webhook", "no host"},
		{"webhook bad", head + "    deliver:\n      webhook: 'http://[::1'\n", 6, "deliver.webhook", "not a URL"},
		{"webhook and subject", head + "    deliver:\n      subject: a.b\n      webhook: http://x/\n", 7, "deliver.webhook", "a webhook excludes subject"},
		{"webhook and stream", head + "    deliver:\n      webhook: http://x/\n      stream: S\n", 6, "deliver.webhook", "a webhook excludes stream"},
		{"timeout unitless", head + "    deliver:\n      webhook: http://x/\n      timeout: 5\n", 7, "deliver.timeout", `"5": want a duration`},
		{"timeout zero", head + "    deliver:\n      webhook: http://x/\n      timeout: 0s\n", 7, "deliver.timeout", "want a positive duration"},
		{"timeout negative", head + "    deliver:\n      webhook: http://x/\n      timeout: -1s\n", 7, "deliver.timeout", "want a positive duration"},
		{"retry not a mapping", head + "    retry: 5\n", 5, "retry", "want a mapping of attempts, backoff, max_backoff, deadline"},
		{"attempts zero", head + "    retry:\n      attempts: 0\n", 6, "retry.attempts", "want at least 1"},
		{"attempts text", head + "    retry:\n      attempts: many\n", 6, "retry.attempts", "want a whole number"},
		{"backoff zero", head + "    retry:\n      backoff: 0s\n", 6, "retry.backoff", "want a positive duration"},
		{"backoff above max", head + "    retry:\n      backoff: 2m\n", 6, "retry.backoff", "2m0s is more than max_backoff 1m0s"},
		{"max below backoff", head + "    retry:\n      deadline: 1h\n      max_backoff: 500ms\n", 7, "retry.backoff", "1s is more than max_backoff 500ms"},
		{"deadline", head + "    retry: {deadline: soon}\n", 5, "retry.deadline", `"soon": want a duration`},
		{"flow column", head + "    retry: {attempts: 5, backoff: -1s}\n", 5, "retry.backoff", "want a positive duration"},
		{"max_backoff typo", head + "    retry: {max-backoff: 1s}\n", 5, "retry", `(did you mean "max_backoff"?)`},
		{"budget zero", head + "    retry: {attempts: 5, budget: 0%}\n", 5, "retry.budget", `"0%": want a share above 0% and at most 100%, such as 20% or 0.2, or off`},
		{"budget above all", head + "    retry:\n      budget: 120%\n", 6, "retry.budget", `"120%": want a share above 0%`},
		{"budget without %", head + "    retry:\n      budget: 20\n", 6, "retry.budget", `"20": want a share above 0%`},
		{"budget negative", head + "    retry:\n      budget: -100%\n", 6, "retry.budget", `"-100%": want a share`},
		{"budget text", head + "    retry:\n      budget: none\n", 6, "retry.budget", `"none": want a share`},
		{"budget typo", head + "    retry:\n      budget: of\n", 6, "retry.budget", `or off (did you mean "off"?)`},
		{"budget list", head + "    retry:\n      budget: [20%]\n", 6, "retry.budget", "want a share above 0%"},
		{"admit algorithm", head + "    admit:\n      algorithm: leaky\n      limit: 1/s\n", 6, "admit.algorithm", `"leaky": want one of gcra, token_bucket`},
		{"admit algorithm typo", head + "    admit:\n      algorithm: token-bucket\n      limit: 1/s\n", 6, "admit.algorithm", `(did you mean "token_bucket"?)`},
		{"admit algorithm missing", head + "    admit:\n      limit: 1/s\n", 5, "admit.algorithm", "missing"},
		{"admit limit missing", head + "    admit:\n      algorithm: gcra\n", 5, "admit.limit", "missing"},
		{"admit limit bad", head + "    admit:\n      algorithm: gcra\n      limit: lots\n", 7, "admit.limit", `rate "lots"`},
		{"admit windowed fraction", head + "    admit:\n      algorithm: sliding_log\n      limit: 2.5/s\n", 7, "admit.limit", "N must be a whole number"},
		{"admit windowed burst", head + "    admit:\n      algorithm: fixed_window\n      limit: 2/s\n      burst: 3\n", 8, "admit.burst", "fixed_window takes no burst"},
		{"admit burst negative", head + "    admit:\n      algorithm: gcra\n      limit: 2/s\n      burst: -1\n", 8, "admit.burst", "want 0 or more"},
		{"admit shadow", head + "    admit:\n      algorithm: gcra\n      limit: 2/s\n      shadow: 1\n", 8, "admit.shadow", "want true or false"},
		{"admit fail", head + "    admit:\n      algorithm: gcra\n      limit: 2/s\n      fail: maybe\n", 8, "admit.fail", `"maybe": want "open" or "closed"`},
		{"admit fail typo", head + "    admit:\n      algorithm: gcra\n      limit: 2/s\n      fail: opn\n", 8, "admit.fail", `"opn": want "open" or "closed" (did you mean "open"?)`},
		{"admit typo", head + "    admit: of\n", 5, "admit", `"of": want off or a mapping of algorithm, limit, burst, shadow, fail (did you mean "off"?)`},
		{"adapt typo", head + "    adapt: onn\n", 5, "adapt", `want on, off or a mapping of per, floor, latency, tolerance (did you mean "on"?)`},
		{"adapt per typo", head + "    adapt:\n      per: polcy\n", 6, "adapt.per", `or "policy" (the total adapts) (did you mean "policy"?)`},
		{"adapt not a mapping", head + "    adapt: yes\n", 5, "adapt", `"yes": want on, off or a mapping of per, floor, latency, tolerance`},
		{"adapt unknown field", head + "    adapt:\n      flor: 1/s\n", 6, "adapt", `unknown field "flor" (did you mean "floor"?)`},
		{"adapt per unknown", head + "    adapt:\n      per: tenant\n", 6, "adapt.per", `"tenant": want "key" (each key's outflow adapts) or "policy"`},
		{"adapt per policy without total", head + "    adapt:\n      per: policy\n", 6, "adapt.per", `"policy" adapts the total cap: set total, or per "key"`},
		{"adapt floor bad", head + "    adapt: {floor: slow}\n", 5, "adapt.floor", `rate "slow"`},
		{"adapt floor above ceiling", head + "    adapt:\n      floor: 30/s\n", 6, "adapt.floor", "30/s is above outflow 20/s, the ceiling it adapts under: lower adapt.floor to at most 20/s, or raise outflow to at least 30/s"},
		{"adapt floor above total", head + "    total: 40/s\n    adapt:\n      per: policy\n      floor: 50/s\n", 8, "adapt.floor", "50/s is above total 40/s, the ceiling it adapts under: lower adapt.floor to at most 40/s, or raise total to at least 50/s"},
		{"adapt latency unitless", head + "    adapt:\n      latency: 200\n", 6, "adapt.latency", `"200": want a duration`},
		{"adapt latency negative", head + "    adapt:\n      latency: -1s\n", 6, "adapt.latency", "want a positive duration"},
		{"adapt tolerance one", head + "    adapt:\n      tolerance: 1\n", 6, "adapt.tolerance", "1: want a number above 1 and at most 10"},
		{"adapt tolerance huge", head + "    adapt: {tolerance: 11}\n", 5, "adapt.tolerance", "11: want a number above 1"},
		{"adapt tolerance text", head + "    adapt:\n      tolerance: high\n", 6, "adapt.tolerance", "want a number such as 1.5"},
		{"merge key", head + "    <<: {queue: 5}\n", 5, "", "merge keys"},
		{"unknown top-level field", "base: &base {outflow: 1/s, queue: 3}\npolicies: [{name: a, outflow: 2/s, queue: 3}]\n", 1, "", `unknown field "base"`},
		{"second document", head + "---\npolicies: []\n", 5, "", "a second YAML document"},
		{"second policy bad", head + "\n  - name: emails\n    outflow: 5/s\n    queue: 1000\n    overflow: later\n", 9, "overflow", `"later"`},
		// YAML syntax errors: the line is where the problem is, not where
		// yaml.v3 says it is.
		{"syntax indent", "policies:\n  - name: a\n    outflow: 1/s\n   queue: 1\n", 4, "", "yaml: did not find expected '-' indicator"},
		{"syntax first line", "a: b: c\n", 1, "", "yaml: mapping values are not allowed"},
		{"syntax tab", "policies:\n\t- name: a\n", 2, "", "yaml: found character that cannot start any token (the line holds a tab: YAML indents with spaces only)"},
		{"syntax open quote", head + "    overflow: \"defer\n", 5, "", "yaml:"},
		{"syntax open flow", head + "    retry: {attempts: 1\n    admit: 1\n", 5, "", "yaml:"},
		{"syntax unknown anchor", head + "  - *nope\n", 5, "", "yaml: unknown anchor 'nope' referenced"},
		{"syntax late", head + "  - name: b\n    outflow: 1/s\n    queue: 1\n  x\n", 8, "", "yaml: could not find expected ':'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := Parse("policies.yaml", []byte(tt.in))
			if err == nil {
				t.Fatalf("Parse(%q) = %v, want error", tt.in, set.Policies())
			}
			if set != nil {
				t.Errorf("Parse returned a Set with its error")
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse error %v (%T) is not an *Error", err, err)
			}
			if e.File != "policies.yaml" || e.Line != tt.line || e.Field != tt.field {
				t.Errorf("Parse error at %s:%d field %q, want policies.yaml:%d field %q (%v)", e.File, e.Line, e.Field, tt.line, tt.field, err)
			}
			if !strings.Contains(e.Msg, tt.want) {
				t.Errorf("Parse error message %q, want it to contain %q", e.Msg, tt.want)
			}
			first, _, _ := strings.Cut(err.Error(), "\n")
			if first != e.Error() {
				t.Errorf("first line of the error = %q, want the first error %q", first, e.Error())
			}
		})
	}
}

func TestErrorString(t *testing.T) {
	_, err := Parse("policies.yaml", []byte(`
policies:
  - name: emails
    outflow: 5/s
    queue: 1000
  - name: orders
    outflow: fast
    queue: 100
    retry: {attempts: 0}
`))
	want := `policies.yaml:7: policy "orders": outflow: rate "fast": want N/s, N/m, N/h, N/d or N/<duration>
policies.yaml:9:23: policy "orders": retry.attempts: 0: want at least 1`
	if err == nil || err.Error() != want {
		t.Errorf("Parse error =\n%v\nwant\n%s", err, want)
	}

	tests := []struct {
		e    Error
		want string
	}{
		{Error{File: "p.yaml", Msg: "empty file"}, "p.yaml: empty file"},
		{Error{Line: 3, Field: "queue", Msg: "bad"}, "line 3: queue: bad"},
		{Error{Line: 3, Column: 9, Msg: "bad"}, "line 3, column 9: bad"},
		{Error{Policy: "a", Field: "queue", Msg: "bad"}, `policy "a": queue: bad`},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("%#v.Error() = %q, want %q", tt.e, got, tt.want)
		}
	}
}

func TestParseManyErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString("policies:\n")
	for range 30 {
		b.WriteString("  - name: a\n    outflow: fast\n    queue: 1\n")
	}
	_, err := Parse("p.yaml", []byte(b.String()))
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxErrors+1 || lines[maxErrors] != "p.yaml: and 39 more" {
		t.Errorf("Parse with 59 errors reported %d lines ending %q, want %d ending %q", len(lines), lines[len(lines)-1], maxErrors+1, "p.yaml: and 39 more")
	}
	if !strings.HasPrefix(lines[0], "p.yaml:3: ") {
		t.Errorf("first error %q, want it on line 3", lines[0])
	}
}

func TestLoad(t *testing.T) {
	set, err := Load("../policies.yaml")
	if err != nil {
		t.Fatalf("Load(../policies.yaml) error: %v", err)
	}
	var names []string
	for _, p := range set.Policies() {
		names = append(names, p.Name)
	}
	if got, want := strings.Join(names, " "), "orders emails reports"; got != want {
		t.Errorf("Load(../policies.yaml) policies = %s, want %s", got, want)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(path, []byte("policies:\n  - name: x\n    outflow: fast\n    queue: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.HasPrefix(err.Error(), path+":3: ") {
		t.Errorf("Load(%s) error = %v, want it to start with %s:3: ", path, err, path)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) error = %v, want os.ErrNotExist", err)
	}
}

// Deliveries to NATS are confirmed unless a policy opts into publishing;
// confirm: true|false is the older spelling of mode confirm|publish.
func TestDeliverMode(t *testing.T) {
	for _, c := range []struct {
		deliver string
		want    DeliverMode
	}{
		{"", DeliverConfirm},
		{"    deliver: out.x\n", DeliverConfirm},
		{"    deliver: {mode: publish}\n", DeliverPublish},
		{"    deliver: {mode: confirm}\n", DeliverConfirm},
		{"    deliver: {confirm: true}\n", DeliverConfirm},
		{"    deliver: {confirm: false}\n", DeliverPublish},
		{"    deliver: {stream: OUT}\n", ""},
		{"    deliver: {stream: OUT, mode: confirm}\n", ""},
		{"    deliver: {webhook: 'http://x/'}\n", ""},
	} {
		set, err := Parse("p.yaml", []byte("policies:\n  - name: p\n    outflow: 1/s\n    queue: 1\n"+c.deliver))
		if err != nil {
			t.Errorf("%q: %v", c.deliver, err)
			continue
		}
		p, _ := set.Lookup("p")
		if p.Deliver.Mode != c.want {
			t.Errorf("%q: mode %q, want %q", c.deliver, p.Deliver.Mode, c.want)
		}
		b, _ := json.Marshal(p.Deliver)
		var back Deliver
		if err := json.Unmarshal(b, &back); err != nil || back != p.Deliver {
			t.Errorf("%q: JSON %s decodes as %+v, %v", c.deliver, b, back, err)
		}
	}
}
