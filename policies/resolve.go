package policies

import (
	"fmt"
	"strings"
)

// Resolve returns the policy p describes: the fields p sets, and the
// default of every field it leaves out or resets (see the package
// documentation), checked with the rules of the policy file format. This
// is the one place defaults are applied: Parse resolves each policy of the
// file, Set.With each policy it is given, and a running shaper the file's
// Patch merged with the live override. On failure it returns the zero
// Policy and every problem as an *Error without a file position, several
// joined with errors.Join. The Policy's Line is 0.
func (p Patch) Resolve() (Policy, error) {
	pol, errs := p.resolve()
	if len(errs) > 0 {
		if checkName(pol.Name) == "" {
			for _, e := range errs {
				e.Policy = pol.Name
			}
		}
		return Policy{}, joinErrors(errs)
	}
	return pol, nil
}

// resolve is Resolve's work: the policy, defaults filled in, and its
// problems (each with Field and Msg), the required fields left out first.
func (p Patch) resolve() (Policy, []*Error) {
	var errs []*Error
	missing := map[string]bool{}
	need := func(field string, given bool, want string) {
		if !given {
			missing[field] = true
			errs = append(errs, &Error{Field: field, Msg: "missing: " + want})
		}
	}
	var pol Policy
	var ok bool
	pol.Name, ok = p.Name.Get()
	need("name", ok, "want a name of letters, digits, _ and -")
	pol.Outflow, ok = p.Outflow.Get()
	need("outflow", ok, "want a rate such as 20/s")
	pol.Queue, ok = p.Queue.Get()
	need("queue", ok, fmt.Sprintf("want a whole number from %d to %d", minQueue, maxQueue))
	pol.Overflow = p.Overflow.or(DefaultOverflow)
	pol.Total = p.Total.or(Rate{})
	pol.Partitions = p.Partitions.or(0)
	if n, ok := p.Partitions.Get(); ok && n == 0 {
		// Zero is the default in a Policy, but not a number of partitions.
		errs = append(errs, &Error{Field: "partitions", Msg: fmt.Sprintf("0: want a whole number from 1 to %d", MaxPartitions)})
	}

	d, _ := p.Deliver.Get()
	pol.Deliver = Deliver{
		Subject: d.Subject.or(""),
		Stream:  d.Stream.or(""),
		Mode:    d.Mode.or(""),
		Webhook: d.Webhook.or(""),
		Timeout: d.Timeout.or(DefaultWebhookTimeout),
	}
	_, subject := d.Subject.Get()
	if pol.Deliver.Webhook == "" && !subject {
		pol.Deliver.Subject = DefaultDeliverPrefix + "." + pol.Name
	}
	if pol.Deliver.Webhook == "" && pol.Deliver.Stream == "" && pol.Deliver.Mode == "" {
		pol.Deliver.Mode = DeliverConfirm
	}
	if pol.Deliver.Stream != "" && pol.Deliver.Mode == DeliverConfirm {
		pol.Deliver.Mode = "" // a stream always confirms
	}

	r, _ := p.Retry.Get()
	pol.Retry = Retry{
		Attempts:   r.Attempts.or(DefaultRetryAttempts),
		Backoff:    r.Backoff.or(DefaultRetryBackoff),
		MaxBackoff: r.MaxBackoff.or(DefaultRetryMaxBackoff),
		Deadline:   r.Deadline.or(DefaultRetryDeadline),
		Budget:     r.Budget.or(DefaultRetryBudget),
	}

	if a, ok := p.Admit.Get(); ok && !a.Off {
		pol.Admit = &Admit{
			Algorithm: a.Algorithm.or(""),
			Limit:     a.Limit.or(Rate{}),
			Burst:     a.Burst.or(0),
			Shadow:    a.Shadow.or(false),
			Fail:      a.Fail.or(DefaultAdmitFail),
		}
		_, ok := a.Algorithm.Get()
		need("admit.algorithm", ok, "want one of "+strings.Join(algorithms, ", "))
		_, ok = a.Limit.Get()
		need("admit.limit", ok, "want a rate such as 600/m")
	}

	pol.Adapt = resolveAdapt(p.Adapt)
	c, _ := p.Concurrency.Get()
	pol.Concurrency = Concurrency{Key: c.Key.or(DefaultConcurrencyKey), Total: c.Total.or(0)}
	if n, ok := c.Total.Get(); ok && n == 0 {
		// Zero is no bound in a Policy, which leaving total out says.
		errs = append(errs, &Error{Field: "concurrency.total", Msg: fmt.Sprintf("0: want a whole number from 1 to %d (leave it out for no bound)", MaxConcurrency)})
	}

	// The default subject of a policy without a usable name is no subject:
	// the name's problem is the one to report.
	badName := checkName(pol.Name) != ""
	for _, e := range pol.validate() {
		if missing[e.Field] || e.Field == "deliver.subject" && !subject && badName {
			continue
		}
		errs = append(errs, e)
	}
	return pol, errs
}

// patchOf returns p as Set.With reads it: a field that has a default is
// left out when it is zero, every other field is set as it is.
func patchOf(p Policy) Patch {
	out := Patch{
		Name:       Value(p.Name),
		Outflow:    Value(p.Outflow),
		Queue:      Value(p.Queue),
		Total:      Value(p.Total),
		Partitions: nonZero(p.Partitions),
		Deliver: Value(DeliverPatch{
			Subject: nonZero(p.Deliver.Subject),
			Stream:  Value(p.Deliver.Stream),
			Mode:    Value(p.Deliver.Mode),
			Webhook: Value(p.Deliver.Webhook),
			Timeout: nonZero(p.Deliver.Timeout),
		}),
		Overflow: nonZero(p.Overflow),
		Retry: Value(RetryPatch{
			Attempts:   nonZero(p.Retry.Attempts),
			Backoff:    nonZero(p.Retry.Backoff),
			MaxBackoff: nonZero(p.Retry.MaxBackoff),
			Deadline:   nonZero(p.Retry.Deadline),
			Budget:     nonZero(p.Retry.Budget),
		}),
		Concurrency: Value(ConcurrencyPatch{Key: nonZero(p.Concurrency.Key), Total: nonZero(p.Concurrency.Total)}),
	}
	if a := p.Admit; a != nil {
		out.Admit = Value(AdmitPatch{
			Algorithm: Value(a.Algorithm),
			Limit:     Value(a.Limit),
			Burst:     Value(a.Burst),
			Shadow:    Value(a.Shadow),
			Fail:      nonZero(a.Fail),
		})
	}
	out.Adapt = adaptPatch(p.Adapt, false)
	return out
}

// nonZero is v as a Field, absent when v is zero.
func nonZero[T comparable](v T) Field[T] {
	var zero T
	if v == zero {
		return Field[T]{}
	}
	return Value(v)
}
