package policies

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func mustPatch(t testing.TB, s string) Patch {
	t.Helper()
	p, err := ParsePatch([]byte(s))
	if err != nil {
		t.Fatalf("ParsePatch(%s): %v", s, err)
	}
	return p
}

func TestResolve(t *testing.T) {
	one := Rate{1, time.Second}
	base := `"name": "a", "outflow": "1/s", "queue": 1`
	tests := []struct {
		in   string
		want func(p *Policy)
	}{
		{`{` + base + `}`, func(p *Policy) {}},
		// A null is the default, as a field left out is.
		{`{` + base + `, "overflow": null, "total": null, "deliver": null, "retry": {"attempts": null}, "admit": null}`, func(p *Policy) {}},
		{`{` + base + `, "total": "off", "admit": "off"}`, func(p *Policy) {}},
		{`{` + base + `, "retry": {"budget": "off", "deadline": "2h"}}`, func(p *Policy) {
			p.Retry.Budget, p.Retry.Deadline = BudgetOff, 2*time.Hour
		}},
		{`{` + base + `, "deliver": {"stream": "S", "mode": "confirm"}}`, func(p *Policy) {
			p.Deliver.Stream, p.Deliver.Mode = "S", "" // a stream always confirms
		}},
		{`{` + base + `, "deliver": {"webhook": "http://x/"}}`, func(p *Policy) {
			p.Deliver = Deliver{Webhook: "http://x/", Timeout: DefaultWebhookTimeout}
		}},
		{`{` + base + `, "admit": {"algorithm": "gcra", "limit": "5/s"}}`, func(p *Policy) {
			p.Admit = &Admit{Algorithm: "gcra", Limit: Rate{5, time.Second}, Fail: DefaultAdmitFail}
		}},
	}
	for _, tt := range tests {
		want := defaults("a", one, 1, 0)
		tt.want(&want)
		got, err := mustPatch(t, tt.in).Resolve()
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Resolve(%s) = %+v, %v;\nwant %+v", tt.in, got, err, want)
		}
	}

	bad := []struct{ in, want string }{
		{`{}`, "name: missing: want a name of letters, digits, _ and -\noutflow: missing: want a rate such as 20/s\nqueue: missing: want a whole number from 1 to 1000000"},
		{`{"name": "a", "outflow": "1/s", "queue": 0}`, `policy "a": queue: 0: want a whole number from 1 to 1000000`},
		{`{` + base + `, "retry": {"backoff": "2m"}}`, `policy "a": retry.backoff: 2m0s is more than max_backoff 1m0s`},
		{`{` + base + `, "admit": {"shadow": true}}`, `policy "a": admit.algorithm: missing: want one of gcra, token_bucket, fixed_window, sliding_log, sliding_window
policy "a": admit.limit: missing: want a rate such as 600/m`},
		{`{` + base + `, "overflow": "drop"}`, `policy "a": overflow: "drop": want "reject" or "defer"`},
		{`{"name": "a/b", "outflow": "1/s", "queue": 1}`, `name: "a/b": want only letters, digits, _ and -`}, // no subject error from the name
	}
	for _, tt := range bad {
		p, err := mustPatch(t, tt.in).Resolve()
		var e *Error
		if err == nil || err.Error() != tt.want || !errors.As(err, &e) || !reflect.DeepEqual(p, Policy{}) {
			t.Errorf("Resolve(%s) = %+v, %v; want the zero Policy and\n%s", tt.in, p, err, tt.want)
		}
	}
}

// The example: a live change of one retry field leaves the
// file's other retry fields as they are (the budget stays off).
func TestResolveOneRetryField(t *testing.T) {
	set, err := Parse("p.yaml", []byte("policies:\n  - name: orders\n    outflow: 20/s\n    queue: 100\n    retry: {attempts: 5, backoff: 7s, deadline: 2h, budget: off}\n"))
	if err != nil {
		t.Fatal(err)
	}
	file, _ := set.Patch("orders")
	live, err := file.Merge(mustPatch(t, `{"retry": {"attempts": 3}}`)).Resolve()
	want := Retry{Attempts: 3, Backoff: 7 * time.Second, MaxBackoff: DefaultRetryMaxBackoff, Deadline: 2 * time.Hour, Budget: BudgetOff}
	if err != nil || live.Retry != want {
		t.Errorf("retry after {\"retry\": {\"attempts\": 3}} = %+v, %v; want %+v", live.Retry, err, want)
	}
	// A null takes the field back to the file's, not to the default.
	over := mustPatch(t, `{"retry": {"attempts": 3, "backoff": "1s"}}`).Merge(mustPatch(t, `{"retry": {"backoff": null}}`))
	if live, _ := file.Merge(over).Resolve(); live.Retry.Backoff != 7*time.Second || live.Retry.Attempts != 3 {
		t.Errorf("after a reset of backoff: %+v, want the file's 7s and the override's 3 attempts", live.Retry)
	}
}

// The override a release before merge patches stored was a whole policy:
// it still reads, as a Patch that sets every field but name and deliver.
func TestParseOverrideWholePolicy(t *testing.T) {
	set, err := Parse("p.yaml", []byte(`
policies:
  - name: orders
    outflow: 20/s
    queue: 100
    total: 500/s
    deliver: {subject: out.orders, timeout: 3s}
    retry: {attempts: 5, backoff: 7s, deadline: 2h, budget: off}
    admit: {algorithm: gcra, limit: 10/s, shadow: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	file, _ := set.Patch("orders")
	stored, _ := set.Lookup("orders")
	stored.Outflow, stored.Queue, stored.Total, stored.Admit = Rate{7, time.Second}, 9, Rate{}, nil
	stored.Retry.Attempts = 3
	stored.Deliver.Subject = "elsewhere" // not the file's: never applied
	old, err := json.Marshal(stored)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name":"orders"`, `"outflow":"7/s"`} {
		if !strings.Contains(string(old), want) {
			t.Fatalf("the stored policy %s has no %s", old, want)
		}
	}
	over, err := ParseOverride(old)
	if err != nil {
		t.Fatalf("ParseOverride(%s) = %v", old, err)
	}
	if got := strings.Join(over.Paths(), " "); got != "outflow queue overflow total retry.attempts retry.backoff retry.max_backoff retry.deadline retry.budget admit adapt concurrency.key" {
		t.Errorf("ParseOverride(%s) sets %s, want every field but name and deliver", old, got)
	}
	live, err := file.Merge(over).Resolve()
	if err != nil {
		t.Fatal(err)
	}
	want := stored
	want.Deliver, want.Line = Deliver{Subject: "out.orders", Mode: DeliverConfirm, Timeout: 3 * time.Second}, 0
	if !reflect.DeepEqual(live, want) {
		t.Errorf("file ⊕ old override = %+v\nwant %+v (no total, no admit: the stored policy had none)", live, want)
	}

	// A Patch as stored now reads as itself.
	patch := mustPatch(t, `{"queue": 9, "retry": {"budget": "20%"}, "admit": "off"}`)
	b, _ := json.Marshal(patch)
	if got, err := ParseOverride(b); err != nil || got != patch {
		t.Errorf("ParseOverride(%s) = %+v, %v; want %+v", b, got, err, patch)
	}
	if _, err := ParseOverride([]byte(`{"queue": "many"}`)); err == nil {
		t.Error("ParseOverride of a bad override succeeded")
	}
}

func TestDiff(t *testing.T) {
	a := defaults("a", Rate{1, time.Second}, 1, 3)
	b := a.Clone()
	if d := Diff(a, b); len(d) != 0 {
		t.Errorf("Diff of equal policies = %v", d)
	}
	b.Outflow, b.Total, b.Retry.Budget, b.Retry.Backoff = Rate{2, time.Second}, Rate{5, time.Minute}, BudgetOff, 7*time.Second
	b.Admit = &Admit{Algorithm: "gcra", Limit: Rate{1, time.Second}, Fail: FailOpen}
	var got []string
	for _, c := range Diff(a, b) {
		got = append(got, c.String())
	}
	want := "outflow 1/s → 2/s; total none → 5/m; retry.backoff 1s → 7s; retry.budget 20% → off; admit none → gcra 1/s fail open"
	if strings.Join(got, "; ") != want {
		t.Errorf("Diff =\n%s\nwant\n%s", strings.Join(got, "; "), want)
	}
	c := b.Clone()
	c.Admit.Shadow, c.Admit.Burst = true, 4
	if d := Diff(b, c); len(d) != 2 || d[0].Field != "admit.burst" || d[1].String() != "admit.shadow false → true" {
		t.Errorf("Diff of admit fields = %v", d)
	}
}

// FuzzPatch decodes two live changes, merges them into an override over a
// policy file's Patch and resolves the result: nothing panics, a decoded
// change encodes back to itself, an override holds no nulls, and a
// resolved policy either validates or an error says why.
func FuzzPatch(f *testing.F) {
	for _, s := range [][2]string{
		{`{"outflow": "50/s"}`, `{"outflow": null}`},
		{`{"retry": {"attempts": 3}}`, `{"retry": {"backoff": "2m"}}`},
		{`{"retry": null, "total": "off"}`, `{"admit": "off"}`},
		{`{"admit": {"algorithm": "fixed_window", "limit": "2.5/s"}}`, `{"admit": {"burst": 3}}`},
		{`{"deliver": {"webhook": "http://x/"}}`, `{"deliver": null}`},
		{`{"queue": 0}`, `{"queue": 1e3}`},
		{`{"name": "b"}`, `[{"a": [null, true, 1.5]}]`},
		{`{"retry": {"budget": 0.5}}`, `{"retry": {"budget": "off", "deadline": "1ns"}}`},
		{`not json`, `{"admit": {"shadow": true, "fail": "closed"}}`},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	set, err := Parse("f.yaml", []byte(`
policies:
  - name: a
    outflow: 1/s
    queue: 5
    retry: {attempts: 5, backoff: 7s, deadline: 2h, budget: off}
    admit: {algorithm: token_bucket, limit: 600/m, burst: 10}
`))
	if err != nil {
		f.Fatal(err)
	}
	file, _ := set.Patch("a")
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var over Patch
		for _, data := range [][]byte{a, b} {
			change, err := ParsePatch(data)
			if err != nil {
				var e *Error
				if !errors.As(err, &e) || change != (Patch{}) {
					t.Fatalf("ParsePatch(%q) = %+v, %v; want the empty Patch and an *Error", data, change, err)
				}
				continue
			}
			enc, err := json.Marshal(change)
			if err != nil {
				t.Fatalf("Marshal(%+v): %v", change, err)
			}
			if back, err := ParsePatch(enc); err != nil || back != change {
				t.Fatalf("ParsePatch(%s) (the encoding of %q) = %+v, %v; want %+v", enc, data, back, err, change)
			}
			over = over.Merge(change)
		}
		if over.Merge(Patch{}) != over {
			t.Fatalf("the override %+v holds nulls or empty blocks", over)
		}
		p, err := file.Merge(over).Resolve()
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Resolve error %v is not an *Error", err)
			}
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("Resolve returned %+v, which does not validate: %v", p, err)
		}
	})
}
