package policies

import (
	"math"
	"os"
	"testing"
)

func nan() float64 { return math.NaN() }

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"20/s", "0.5/s", "5/10s", "600/m", "1/d", "3/2s", "600/1m30s", "1e3/h",
		"fast", "0/s", "-1/s", "1/0s", "NaN/s", "1/", "/s", "1e400/s", "1/1ns", "+.5/2h45m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRate(s)
		if err != nil {
			if r != (Rate{}) {
				t.Errorf("ParseRate(%q) = %#v with an error, want the zero Rate", s, r)
			}
			return
		}
		if err := r.check(); err != nil {
			t.Errorf("ParseRate(%q) = %#v, which fails its own check: %v", s, r, err)
		}
		if r.Interval() <= 0 || r.PerSecond() <= 0 {
			t.Errorf("ParseRate(%q) = %#v: Interval %v, PerSecond %v, want positive", s, r, r.Interval(), r.PerSecond())
		}
		back, err := ParseRate(r.String())
		if err != nil || back != r {
			t.Errorf("ParseRate(%q) = %#v, %v; want %#v (round trip of %q)", r.String(), back, err, r, s)
		}
	})
}

func FuzzParseBudget(f *testing.F) {
	for _, s := range []string{"20%", "0.2", "12.5%", "1", "100%", "off", "0%", "0", "120%", "20", "-100%", "-1", "NaN",
		"1e-3%", "0x1p-2", " 7% ", "%", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseBudget(s)
		if err != nil {
			if b != 0 {
				t.Errorf("ParseBudget(%q) = %v with an error, want 0", s, float64(b))
			}
			return
		}
		if !b.usable() {
			t.Errorf("ParseBudget(%q) = %v, not a usable budget", s, float64(b))
		}
		if share := b.Share(); share < 0 || share > 1 || (share == 0) != (b == BudgetOff) {
			t.Errorf("ParseBudget(%q).Share() = %v, want 0 for off, else in (0, 1]", s, share)
		}
		back, err := ParseBudget(b.String())
		if err != nil || back != b {
			t.Errorf("ParseBudget(%q) = %v, %v; want %v (round trip of %q)", b.String(), float64(back), err, float64(b), s)
		}
	})
}

func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("../policies.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(twoPolicies))
	f.Add([]byte("policies:\n  - name: a\n    outflow: 1/s\n    queue: 1\n    deliver: {webhook: 'http://x/'}\n    retry: {backoff: 2s}\n"))
	f.Add([]byte("policies: [{name: a, outflow: 1/s, queue: 1, admit: {algorithm: fixed_window, limit: 3/s}}]"))
	f.Add([]byte("policies: [{name: a, outflow: 1/s, queue: 1, retry: {budget: 12.5%}}, {name: b, outflow: 1/s, queue: 1, retry: {budget: off}}]"))
	f.Add([]byte("policies: [{name: a, outflow: 50/s, queue: 1, adapt: {per: key, floor: 2/s, latency: 200ms, tolerance: 2}}, {name: b, outflow: 1/s, total: 9/s, queue: 1, adapt: {per: policy}}, {name: c, outflow: 1/s, queue: 1, adapt: {}}]"))
	f.Add([]byte("a: &x [*x]\npolicies:\n  - *x\n"))
	f.Add([]byte("policies: [{name: a, outflow: 1/s, queue: 1, concurrency: {key: 2, total: 4}}, {name: b, outflow: 1/s, queue: 1, concurrency: {key: 3}}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := Parse("f.yaml", data)
		if err != nil {
			if set != nil {
				t.Errorf("Parse returned a Set and an error")
			}
			return
		}
		ps := set.Policies()
		if len(ps) == 0 {
			t.Errorf("Parse succeeded with no policies")
		}
		for _, p := range ps {
			if err := p.Validate(); err != nil {
				t.Errorf("Parse returned policy %q that does not validate: %v", p.Name, err)
			}
			if q, ok := set.Lookup(p.Name); !ok || q.Line != p.Line {
				t.Errorf("Lookup(%q) = %v, %v; want the policy of line %d", p.Name, q.Line, ok, p.Line)
			}
			if _, err := set.With(p); err != nil {
				t.Errorf("With(%q) of a parsed policy: %v", p.Name, err)
			}
			patch, _ := set.Patch(p.Name)
			if r, err := patch.Resolve(); err != nil || r.Line != 0 || Diff(r, p) != nil || r.Name != p.Name {
				t.Errorf("Patch(%q).Resolve() = %+v, %v; want the parsed policy %+v", p.Name, r, err, p)
			}
		}
	})
}
