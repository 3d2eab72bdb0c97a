package policies

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

const twoPolicies = `
policies:
  - name: orders
    outflow: 20/s
    queue: 100
  - name: emails
    outflow: 5/s
    queue: 1000
    admit: {algorithm: gcra, limit: 10/s}
`

func TestSetWith(t *testing.T) {
	set, err := Parse("p.yaml", []byte(twoPolicies))
	if err != nil {
		t.Fatal(err)
	}

	// Tune a policy live: look it up, change it, put it back.
	p, _ := set.Lookup("orders")
	p.Outflow = Rate{50, time.Second}
	tuned, err := set.With(p)
	if err != nil {
		t.Fatalf("With(tuned orders) error: %v", err)
	}
	if got, _ := tuned.Lookup("orders"); got.Outflow != p.Outflow || got.Line != 3 {
		t.Errorf("after With, orders outflow %v line %d, want %v line 3", got.Outflow, got.Line, p.Outflow)
	}
	if got, _ := set.Lookup("orders"); got.Outflow != (Rate{20, time.Second}) {
		t.Errorf("With changed the original Set: orders outflow %v, want 20/s", got.Outflow)
	}

	// Add a new policy: defaults are filled in, it comes last.
	added, err := tuned.With(Policy{Name: "new", Outflow: Rate{1, time.Second}, Queue: 5})
	if err != nil {
		t.Fatalf("With(new) error: %v", err)
	}
	want := defaults("new", Rate{1, time.Second}, 5, 0)
	if got, ok := added.Lookup("new"); !ok || !reflect.DeepEqual(got, want) {
		t.Errorf("Lookup(new) = %+v, %v, want %+v, true", got, ok, want)
	}
	var names []string
	for _, p := range added.Policies() {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, " "); got != "orders emails new" {
		t.Errorf("Policies() names = %s, want orders emails new", got)
	}

	// Refused changes leave nothing changed and name the field.
	bad := p
	bad.Queue = 0
	if s, err := set.With(bad); s != nil || err == nil || !strings.Contains(err.Error(), `policy "orders": queue: 0: want a whole number`) {
		t.Errorf("With(queue 0) = %v, %v, want nil and a queue error", s, err)
	}
	var e *Error
	if _, err := set.With(Policy{Name: "ORDERS", Outflow: Rate{1, time.Second}, Queue: 5}); !errors.As(err, &e) || e.Field != "name" {
		t.Errorf("With(ORDERS) error = %v, want a name *Error", err)
	}

	// Copies handed out do not share memory with the Set.
	got, _ := set.Lookup("emails")
	got.Admit.Limit = Rate{1, time.Hour}
	if again, _ := set.Lookup("emails"); again.Admit.Limit != (Rate{10, time.Second}) {
		t.Errorf("changing a looked-up Admit changed the Set: %v", again.Admit.Limit)
	}
	all := set.Policies()
	all[1].Admit.Burst = 99
	if again, _ := set.Lookup("emails"); again.Admit.Burst != 0 {
		t.Errorf("changing Policies()[1].Admit changed the Set")
	}
}

func TestZeroSet(t *testing.T) {
	var s *Set
	if got := s.Policies(); got != nil {
		t.Errorf("nil Set Policies() = %v, want nil", got)
	}
	if _, ok := s.Lookup("a"); ok {
		t.Errorf("nil Set Lookup(a) found a policy")
	}
	next, err := s.With(Policy{Name: "a", Outflow: Rate{1, time.Second}, Queue: 1})
	if err != nil || len(next.Policies()) != 1 {
		t.Errorf("nil Set With(a) = %v, %v, want a Set of one", next, err)
	}
	var zero Set
	if _, err := zero.With(Policy{Name: "a", Outflow: Rate{1, time.Second}, Queue: 1}); err != nil {
		t.Errorf("zero Set With(a) error: %v", err)
	}
}

func TestValidate(t *testing.T) {
	good := defaults("a", Rate{1, time.Second}, 1, 0)
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate(%+v) error: %v", good, err)
	}
	tests := []struct {
		name   string
		change func(p *Policy)
		want   string
	}{
		{"zero", func(p *Policy) { *p = Policy{} }, "name: missing"},
		{"name", func(p *Policy) { p.Name = "a/b" }, `name: "a/b": want only letters`},
		{"outflow NaN", func(p *Policy) { p.Outflow.N = nan() }, "outflow: rate NaN/s: the count N must be a positive number"},
		{"outflow zero", func(p *Policy) { p.Outflow = Rate{} }, "outflow: missing"},
		{"outflow no period", func(p *Policy) { p.Outflow.Per = -time.Second }, "outflow: rate 1/-1s: period must be positive"},
		{"total half set", func(p *Policy) { p.Total = Rate{N: 0, Per: time.Second} }, "total: rate"},
		{"overflow", func(p *Policy) { p.Overflow = "" }, `overflow: "": want "reject" or "defer"`},
		{"subject", func(p *Policy) { p.Deliver.Subject = "" }, "deliver.subject: missing"},
		{"timeout", func(p *Policy) { p.Deliver.Timeout = 0 }, "deliver.timeout: 0s: want a positive duration"},
		{"attempts", func(p *Policy) { p.Retry.Attempts = -1 }, "retry.attempts: -1: want at least 1"},
		{"deadline", func(p *Policy) { p.Retry.Deadline = 0 }, "retry.deadline"},
		{"max_backoff", func(p *Policy) { p.Retry.MaxBackoff = 0 }, "retry.max_backoff"},
		{"budget zero", func(p *Policy) { p.Retry.Budget = 0 }, "retry.budget: 0%: want a share above 0%"},
		{"budget above 1", func(p *Policy) { p.Retry.Budget = 1.5 }, "retry.budget: 150%: want a share"},
		{"admit zero", func(p *Policy) { p.Admit = &Admit{} }, "admit.algorithm: missing"},
		{"admit fail", func(p *Policy) { p.Admit = &Admit{Algorithm: "gcra", Limit: Rate{1, time.Second}} }, `admit.fail: "": want "open" or "closed"`},
	}
	for _, tt := range tests {
		p := good.Clone()
		tt.change(&p)
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: Validate() = %v, want an error containing %q", tt.name, err, tt.want)
		}
		var e *Error
		if !errors.As(err, &e) || e.Line != 0 || e.File != "" {
			t.Errorf("%s: Validate() error %#v, want an *Error without a position", tt.name, e)
		}
	}
}
