package policies

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/shaper-dev/shaper/internal/suggest"
)

// Budget is a policy's retry budget: the share of a key's delivery slots
// that retries of failed deliveries may take while fresh jobs of the key
// wait. A failed job steps aside and the key's fresh jobs go on; its
// retries come in at most this share of the slots (or in any slot no fresh
// job wants). It is a number above 0 and at most 1, written in a policy
// file as a percentage ("20%") or as a decimal (0.2); or BudgetOff. The
// zero Budget is not a usable value: Parse and Set.With fill in
// DefaultRetryBudget. A Budget is a plain value.
type Budget float64

// BudgetOff, written "off", is no retry budget: a failed job blocks its key,
// strictly in order, until it is delivered or dead-lettered.
const BudgetOff Budget = -1

// budgetWant says what a budget may be, for errors.
const budgetWant = "want a share above 0% and at most 100%, such as 20% or 0.2, or off"

// ParseBudget parses a retry budget: "off", a percentage such as "20%" or
// "12.5%", or a decimal share such as "0.2" or "1", above 0 and at most
// 100 %. Surrounding spaces are ignored.
func ParseBudget(s string) (Budget, error) {
	t := strings.TrimSpace(s)
	if t == "off" {
		return BudgetOff, nil
	}
	num, percent := strings.CutSuffix(t, "%")
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || strings.ContainsAny(num, "xXpP_") {
		return 0, fmt.Errorf("%q: %s%s", s, budgetWant, suggest.Hint(t, []string{"off"}))
	}
	if percent {
		v /= 100
	}
	if !(v > 0 && v <= 1) { // not off: -100% is no way to say it
		return 0, fmt.Errorf("%q: %s", s, budgetWant)
	}
	return Budget(v), nil
}

// usable reports whether b is a budget a policy may have.
func (b Budget) usable() bool { return b == BudgetOff || b > 0 && b <= 1 }

// Share returns the share of a key's slots retries may take, 0 when b is
// BudgetOff: the value of drain.Retry.Budget.
func (b Budget) Share() float64 {
	if !(b > 0) { // BudgetOff, or not a budget (negative, NaN)
		return 0
	}
	return float64(b)
}

// String returns b as a policy file writes it: "off", or a percentage with
// as few digits as parse back to b ("20%", "12.5%"), or failing that the
// decimal share.
func (b Budget) String() string {
	if b == BudgetOff {
		return "off"
	}
	v := float64(b) * 100
	for prec := range 7 {
		s := strconv.FormatFloat(v, 'f', prec, 64)
		if back, err := strconv.ParseFloat(s, 64); err == nil && Budget(back/100) == b {
			return s + "%"
		}
	}
	return strconv.FormatFloat(float64(b), 'g', -1, 64)
}

// MarshalText implements encoding.TextMarshaler: b as String writes it.
func (b Budget) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseBudget.
func (b *Budget) UnmarshalText(text []byte) error {
	v, err := ParseBudget(string(text))
	if err != nil {
		return err
	}
	*b = v
	return nil
}
