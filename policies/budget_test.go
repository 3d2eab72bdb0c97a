package policies

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseBudget(t *testing.T) {
	tests := []struct {
		in     string
		want   Budget
		string string
	}{
		{"20%", 0.2, "20%"},
		{"0.2", 0.2, "20%"},
		{" 12.5% ", 0.125, "12.5%"},
		{"7%", 0.07, "7%"},
		{"1", 1, "100%"},
		{"100%", 1, "100%"},
		{"0.001%", 0.00001, "0.001%"},
		{"off", BudgetOff, "off"},
	}
	for _, tt := range tests {
		got, err := ParseBudget(tt.in)
		if err != nil || got != tt.want || got.String() != tt.string {
			t.Errorf("ParseBudget(%q) = %v (%s), %v; want %v (%s)", tt.in, float64(got), got, err, float64(tt.want), tt.string)
		}
	}
	for _, in := range []string{"", "0", "0%", "-0%", "-1", "-100%", "101%", "1.5", "20", "NaN", "inf", "0x1p-2", "20 %%", "Off", "20%%", "1_0%"} {
		if got, err := ParseBudget(in); err == nil || got != 0 || !strings.Contains(err.Error(), budgetWant) {
			t.Errorf("ParseBudget(%q) = %v, %v; want 0 and an error saying %q", in, got, err, budgetWant)
		}
	}
}

func TestBudgetShare(t *testing.T) {
	for b, want := range map[Budget]float64{0.2: 0.2, 1: 1, BudgetOff: 0} {
		if got := b.Share(); got != want {
			t.Errorf("%s.Share() = %v, want %v", b, got, want)
		}
	}
}

// A policy's budget goes to JSON as the policy file writes it, and back;
// JSON without one (from before budgets) gets the default from Set.With.
func TestBudgetJSON(t *testing.T) {
	for _, b := range []Budget{0.2, BudgetOff, 0.125} {
		r := Retry{Attempts: 1, Budget: b}
		data, err := json.Marshal(r)
		if err != nil || !strings.Contains(string(data), `"budget":"`+b.String()+`"`) {
			t.Errorf("json.Marshal(budget %s) = %s, %v", b, data, err)
		}
		var back Retry
		if err := json.Unmarshal(data, &back); err != nil || back.Budget != b {
			t.Errorf("json.Unmarshal(%s) = budget %s, %v; want %s", data, back.Budget, err, b)
		}
	}
	var old Policy
	if err := json.Unmarshal([]byte(`{"name":"a","outflow":"1/s","queue":1,"retry":{"attempts":3}}`), &old); err != nil {
		t.Fatal(err)
	}
	set, err := (*Set)(nil).With(old)
	if err != nil {
		t.Fatalf("With(a policy without a budget) = %v", err)
	}
	if p, _ := set.Lookup("a"); p.Retry.Budget != DefaultRetryBudget {
		t.Errorf("budget of a policy stored without one = %s, want the default %s", p.Retry.Budget, DefaultRetryBudget)
	}
	var bad Retry
	if err := json.Unmarshal([]byte(`{"budget":"200%"}`), &bad); err == nil || !strings.Contains(err.Error(), "retry.budget") {
		t.Errorf("json.Unmarshal of budget 200%% = %v, want a retry.budget error", err)
	}
}

// The forms of a budget in a policy file.
func TestParseBudgetField(t *testing.T) {
	set, err := Parse("p.yaml", []byte(`
policies:
  - {name: a, outflow: 1/s, queue: 1, retry: {budget: 20%}}
  - {name: b, outflow: 1/s, queue: 1, retry: {budget: 0.5}}
  - {name: c, outflow: 1/s, queue: 1, retry: {budget: 1}}
  - {name: d, outflow: 1/s, queue: 1, retry: {budget: off}}
  - {name: e, outflow: 1/s, queue: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range set.Policies() {
		got = append(got, p.Retry.Budget.String())
	}
	if strings.Join(got, " ") != "20% 50% 100% off 20%" {
		t.Errorf("budgets %v, want [20%% 50%% 100%% off 20%%]", got)
	}
}
