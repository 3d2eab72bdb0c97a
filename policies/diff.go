package policies

import (
	"strconv"
	"time"
)

// Change is one field in which two policies differ.
type Change struct {
	// Field is the field's path in the policy file ("retry.backoff"); an
	// admission limit added or removed is "admit".
	Field string
	// From and To are the values as the policy file writes them, "none"
	// for no total cap or no admission limit.
	From, To string
}

// String returns c as "field from → to".
func (c Change) String() string { return c.Field + " " + c.From + " → " + c.To }

// Diff lists the fields in which b differs from a, in the order of the
// policy file format. The names and lines are not compared.
func Diff(a, b Policy) []Change {
	var out []Change
	add := func(field, from, to string) {
		if from != to {
			out = append(out, Change{field, from, to})
		}
	}
	rate := func(r Rate) string {
		if r.IsZero() {
			return "none"
		}
		return r.String()
	}
	str := func(s string) string {
		if s == "" {
			return "none"
		}
		return s
	}
	dur := time.Duration.String
	add("outflow", rate(a.Outflow), rate(b.Outflow))
	add("queue", strconv.Itoa(a.Queue), strconv.Itoa(b.Queue))
	add("overflow", string(a.Overflow), string(b.Overflow))
	add("total", rate(a.Total), rate(b.Total))
	add("partitions", strconv.Itoa(a.Parts()), strconv.Itoa(b.Parts())) // 0 is the default, 1
	add("deliver.subject", str(a.Deliver.Subject), str(b.Deliver.Subject))
	add("deliver.stream", str(a.Deliver.Stream), str(b.Deliver.Stream))
	add("deliver.mode", str(string(a.Deliver.Mode)), str(string(b.Deliver.Mode)))
	add("deliver.webhook", str(a.Deliver.Webhook), str(b.Deliver.Webhook))
	add("deliver.timeout", dur(a.Deliver.Timeout), dur(b.Deliver.Timeout))
	add("retry.attempts", strconv.Itoa(a.Retry.Attempts), strconv.Itoa(b.Retry.Attempts))
	add("retry.backoff", dur(a.Retry.Backoff), dur(b.Retry.Backoff))
	add("retry.max_backoff", dur(a.Retry.MaxBackoff), dur(b.Retry.MaxBackoff))
	add("retry.deadline", dur(a.Retry.Deadline), dur(b.Retry.Deadline))
	add("retry.budget", a.Retry.Budget.String(), b.Retry.Budget.String())
	add("concurrency.key", strconv.Itoa(a.Concurrency.Key), strconv.Itoa(b.Concurrency.Key))
	add("concurrency.total", concurrencyTotal(a.Concurrency.Total), concurrencyTotal(b.Concurrency.Total))
	switch x, y := a.Admit, b.Admit; {
	case x == nil && y == nil:
	case x == nil || y == nil:
		add("admit", admitText(x), admitText(y))
	default:
		add("admit.algorithm", x.Algorithm, y.Algorithm)
		add("admit.limit", rate(x.Limit), rate(y.Limit))
		add("admit.burst", strconv.Itoa(x.Burst), strconv.Itoa(y.Burst))
		add("admit.shadow", strconv.FormatBool(x.Shadow), strconv.FormatBool(y.Shadow))
		add("admit.fail", string(x.Fail), string(y.Fail))
	}
	diffAdapt(a, b, add)
	return out
}

// admitText is an admission limit in a few words, "none" for none.
func admitText(a *Admit) string {
	if a == nil {
		return "none"
	}
	s := a.Algorithm + " " + a.Limit.String()
	if a.Burst > 0 {
		s += " burst " + strconv.Itoa(a.Burst)
	}
	if a.Shadow {
		s += " shadow"
	}
	return s + " fail " + string(a.Fail)
}

// concurrencyTotal is Concurrency.Total as Diff shows it.
func concurrencyTotal(n int) string {
	if n == 0 {
		return "none"
	}
	return strconv.Itoa(n)
}
