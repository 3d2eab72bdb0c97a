package policies

import (
	"strings"
	"time"
)

// Patch is a change to a policy: for each field of the policy and of its
// blocks, whether it is left out, reset (null) or set, and to what. It is
// the one way a policy is said, however it arrives: the policy file gives
// each policy as a Patch (Set.Patch), a live change (PUT
// /v1/policies/{name}, shaper policies set) is a Patch, and a live
// override is the merge of the live changes since the last reset. Resolve
// turns a Patch into a Policy, filling in the defaults.
//
// Its JSON is a JSON merge patch (RFC 7396) of the policy's JSON: a field
// left out keeps its value, null resets it (to the policy file's value, or
// the default when the file leaves it out), and a block (deliver, retry,
// admit) names only the fields it changes: {"retry": {"attempts": 3}}
// changes the attempts and nothing else, {"retry": null} resets the whole
// block. Values are written as in the policy file: "20/s", "1m30s", "20%".
// total "" or "off" is no cap; admit "off" is no admission limit.
//
// The zero Patch changes nothing. A Patch is a plain value, comparable and
// safe to copy.
type Patch struct {
	// Name names the policy; it cannot change once the policy is served.
	Name Field[string] `json:"name,omitzero"`
	// Outflow, Queue, Overflow and Total are the policy's fields of the same
	// names. A Total of the zero Rate is no cap.
	Outflow  Field[Rate]     `json:"outflow,omitzero"`
	Queue    Field[int]      `json:"queue,omitzero"`
	Overflow Field[Overflow] `json:"overflow,omitzero"`
	Total    Field[Rate]     `json:"total,omitzero"`
	// Partitions is Policy.Partitions; a running shaper refuses a change.
	Partitions Field[int] `json:"partitions,omitzero"`
	// Deliver, Retry and Admit change the blocks of the same names, field by
	// field.
	Deliver Field[DeliverPatch] `json:"deliver,omitzero"`
	Retry   Field[RetryPatch]   `json:"retry,omitzero"`
	Admit   Field[AdmitPatch]   `json:"admit,omitzero"`
	// Adapt changes the adapt block, field by field; "off" turns it off.
	Adapt Field[AdaptPatch] `json:"adapt,omitzero"`
	// Concurrency changes the concurrency block, field by field.
	Concurrency Field[ConcurrencyPatch] `json:"concurrency,omitzero"`
}

// DeliverPatch is a change to a policy's Deliver block. The older
// confirm: true|false of the policy file arrives as Mode. A running
// shaper refuses any change of where it delivers.
type DeliverPatch struct {
	// Subject, Stream, Mode, Webhook and Timeout are the fields of Deliver
	// of the same names.
	Subject Field[string]        `json:"subject,omitzero"`
	Stream  Field[string]        `json:"stream,omitzero"`
	Mode    Field[DeliverMode]   `json:"mode,omitzero"`
	Webhook Field[string]        `json:"webhook,omitzero"`
	Timeout Field[time.Duration] `json:"timeout,omitzero"`
}

// RetryPatch is a change to a policy's Retry block.
type RetryPatch struct {
	// Attempts, Backoff, MaxBackoff, Deadline and Budget are the fields of
	// Retry of the same names.
	Attempts   Field[int]           `json:"attempts,omitzero"`
	Backoff    Field[time.Duration] `json:"backoff,omitzero"`
	MaxBackoff Field[time.Duration] `json:"max_backoff,omitzero"`
	Deadline   Field[time.Duration] `json:"deadline,omitzero"`
	Budget     Field[Budget]        `json:"budget,omitzero"`
}

// AdmitPatch is a change to a policy's Admit block, or with Off set (JSON
// and the policy file: admit: off) the removal of its admission limit,
// whatever the file says. A block given after Off builds on the file's
// block again.
type AdmitPatch struct {
	// Off removes the admission limit; the other fields are then unset.
	Off bool `json:"-"`
	// Algorithm, Limit, Burst, Shadow and Fail are the fields of Admit of
	// the same names.
	Algorithm Field[string] `json:"algorithm,omitzero"`
	Limit     Field[Rate]   `json:"limit,omitzero"`
	Burst     Field[int]    `json:"burst,omitzero"`
	Shadow    Field[bool]   `json:"shadow,omitzero"`
	Fail      Field[Fail]   `json:"fail,omitzero"`
}

// ConcurrencyPatch is a change to a policy's Concurrency block.
type ConcurrencyPatch struct {
	// Key and Total are the fields of Concurrency of the same names.
	Key   Field[int] `json:"key,omitzero"`
	Total Field[int] `json:"total,omitzero"`
}

func (c ConcurrencyPatch) merge(q ConcurrencyPatch) ConcurrencyPatch {
	return ConcurrencyPatch{Key: merge(c.Key, q.Key), Total: merge(c.Total, q.Total)}
}

func (c ConcurrencyPatch) empty() bool { return c == ConcurrencyPatch{} }

// Merge returns p with q applied to it as a JSON merge patch (RFC 7396):
// a field q leaves out keeps p's value, a field q sets to null is left out
// (so that what lies below, the policy file or the default, applies), a
// block of q is merged into p's block, and any other value of q replaces
// p's. The result has no nulls and no empty blocks: a live override is the
// Merge of the previous override and the change, and the live policy is
// the Resolve of the file's Patch merged with the override.
func (p Patch) Merge(q Patch) Patch {
	return Patch{
		Name:        merge(p.Name, q.Name),
		Outflow:     merge(p.Outflow, q.Outflow),
		Queue:       merge(p.Queue, q.Queue),
		Overflow:    merge(p.Overflow, q.Overflow),
		Total:       merge(p.Total, q.Total),
		Partitions:  merge(p.Partitions, q.Partitions),
		Deliver:     mergeBlock(p.Deliver, q.Deliver),
		Retry:       mergeBlock(p.Retry, q.Retry),
		Admit:       mergeBlock(p.Admit, q.Admit),
		Adapt:       mergeBlock(p.Adapt, q.Adapt),
		Concurrency: mergeBlock(p.Concurrency, q.Concurrency),
	}
}

func (d DeliverPatch) merge(q DeliverPatch) DeliverPatch {
	return DeliverPatch{
		Subject: merge(d.Subject, q.Subject),
		Stream:  merge(d.Stream, q.Stream),
		Mode:    merge(d.Mode, q.Mode),
		Webhook: merge(d.Webhook, q.Webhook),
		Timeout: merge(d.Timeout, q.Timeout),
	}
}

func (d DeliverPatch) empty() bool { return d == DeliverPatch{} }

func (r RetryPatch) merge(q RetryPatch) RetryPatch {
	return RetryPatch{
		Attempts:   merge(r.Attempts, q.Attempts),
		Backoff:    merge(r.Backoff, q.Backoff),
		MaxBackoff: merge(r.MaxBackoff, q.MaxBackoff),
		Deadline:   merge(r.Deadline, q.Deadline),
		Budget:     merge(r.Budget, q.Budget),
	}
}

func (r RetryPatch) empty() bool { return r == RetryPatch{} }

// merge applies q to a; "off" is no block: q replaces it.
func (a AdmitPatch) merge(q AdmitPatch) AdmitPatch {
	if q.Off {
		return AdmitPatch{Off: true}
	}
	if a.Off {
		a = AdmitPatch{}
	}
	return AdmitPatch{
		Algorithm: merge(a.Algorithm, q.Algorithm),
		Limit:     merge(a.Limit, q.Limit),
		Burst:     merge(a.Burst, q.Burst),
		Shadow:    merge(a.Shadow, q.Shadow),
		Fail:      merge(a.Fail, q.Fail),
	}
}

func (a AdmitPatch) empty() bool { return a == AdmitPatch{} }

// Paths lists the fields p sets or resets, by their path in the policy
// file ("outflow", "retry.attempts"), in the file format's order. A block
// reset as a whole, or admit "off", is listed by its name alone ("retry",
// "admit").
func (p Patch) Paths() []string {
	var out []string
	out = path(out, "name", p.Name)
	out = path(out, "outflow", p.Outflow)
	out = path(out, "queue", p.Queue)
	out = path(out, "overflow", p.Overflow)
	out = path(out, "total", p.Total)
	out = path(out, "partitions", p.Partitions)
	if d, ok := p.Deliver.Get(); ok {
		out = path(out, "deliver.subject", d.Subject)
		out = path(out, "deliver.stream", d.Stream)
		out = path(out, "deliver.mode", d.Mode)
		out = path(out, "deliver.webhook", d.Webhook)
		out = path(out, "deliver.timeout", d.Timeout)
	} else {
		out = path(out, "deliver", p.Deliver)
	}
	if r, ok := p.Retry.Get(); ok {
		out = path(out, "retry.attempts", r.Attempts)
		out = path(out, "retry.backoff", r.Backoff)
		out = path(out, "retry.max_backoff", r.MaxBackoff)
		out = path(out, "retry.deadline", r.Deadline)
		out = path(out, "retry.budget", r.Budget)
	} else {
		out = path(out, "retry", p.Retry)
	}
	if a, ok := p.Admit.Get(); ok && !a.Off {
		out = path(out, "admit.algorithm", a.Algorithm)
		out = path(out, "admit.limit", a.Limit)
		out = path(out, "admit.burst", a.Burst)
		out = path(out, "admit.shadow", a.Shadow)
		out = path(out, "admit.fail", a.Fail)
	} else {
		out = path(out, "admit", p.Admit)
	}
	out = adaptPaths(out, p.Adapt)
	if c, ok := p.Concurrency.Get(); ok {
		out = path(out, "concurrency.key", c.Key)
		out = path(out, "concurrency.total", c.Total)
	} else {
		out = path(out, "concurrency", p.Concurrency)
	}
	return out
}

// IsEmpty reports whether p neither sets nor resets any field.
func (p Patch) IsEmpty() bool { return len(p.Paths()) == 0 }

// Covers reports whether p sets or resets the field at path, or a block
// that holds it: a Patch that sets "admit" (off) covers "admit.limit".
// adapt "on" covers only "adapt": it turns adaptation on and leaves the
// block's fields to what lies below (the policy file); and since any field
// of adapt turns it on, a Patch that sets one covers "adapt" too.
func (p Patch) Covers(path string) bool {
	a, _ := p.Adapt.Get()
	on := a == AdaptPatch{On: true}
	for _, q := range p.Paths() {
		switch {
		case q == path:
			return true
		case strings.HasPrefix(path, q+"."):
			if !(q == "adapt" && on) {
				return true
			}
		case path == "adapt" && strings.HasPrefix(q, "adapt."):
			return true
		}
	}
	return false
}
