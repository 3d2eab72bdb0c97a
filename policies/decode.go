package policies

import (
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shaper-dev/shaper/internal/suggest"
)

// walker decodes the fields of one policy into a Patch: the values, their
// types and syntax. What the values must be together (required fields,
// ranges, one delivery target) is Resolve's to check.
type walker struct {
	*parser
	patch Patch
	// where maps a field path to the node that gave it (or its key, when
	// the value is null or a block); failed holds the paths of fields that
	// failed to decode: they were reported, and hold a zero value so that
	// Resolve neither defaults them nor reports them again.
	where  map[string]pos
	failed map[string]bool
}

func (p *parser) walker() *walker {
	return &walker{parser: p, where: map[string]pos{}, failed: map[string]bool{}}
}

// policy decodes the fields of item, a mapping (anything else is reported).
func (w *walker) policy(item *yaml.Node, flow bool) {
	out := &w.patch
	w.mapping(item, flow, "", policyFields, func(key string, k, v *yaml.Node, flow bool) {
		switch key {
		case "name":
			out.Name = field(w, key, k, v, flow, text[string](w))
		case "outflow":
			out.Outflow = field(w, key, k, v, flow, w.rate)
		case "queue":
			out.Queue = field(w, key, k, v, flow, w.integer)
		case "overflow":
			out.Overflow = field(w, key, k, v, flow, text[Overflow](w))
		case "total":
			out.Total = field(w, key, k, v, flow, w.total)
		case "partitions":
			out.Partitions = field(w, key, k, v, flow, w.integer)
		case "deliver":
			out.Deliver = w.deliver(k, v, flow)
		case "retry":
			out.Retry = w.retry(k, v, flow)
		case "admit":
			out.Admit = w.admit(k, v, flow)
		case "adapt":
			out.Adapt = w.adapt(k, v, flow)
		case "concurrency":
			out.Concurrency = w.concurrency(k, v, flow)
		}
	})
}

// field decodes the value v of the field at path name (its key k) with
// parse: absent for a null in a policy file, where null means left out;
// null for a null in a live change, where it resets the field.
func field[T any](w *walker, name string, k, v *yaml.Node, flow bool, parse func(string, *yaml.Node, bool) T) Field[T] {
	if w.null(name, k, v, flow) {
		if w.live {
			return Null[T]()
		}
		return Field[T]{}
	}
	return Value(parse(name, v, flow))
}

// text returns a decoder of a string field of type S.
func text[S ~string](w *walker) func(string, *yaml.Node, bool) S {
	return func(field string, v *yaml.Node, flow bool) S {
		s, _ := w.str(field, v, flow)
		return S(s)
	}
}

// null notes where the field at path name was given, and reports whether
// its value is null.
func (w *walker) null(name string, k, v *yaml.Node, flow bool) bool {
	switch {
	case isNull(v):
		w.where[name] = at(k, flow)
		return true
	case v.Kind == yaml.ScalarNode:
		w.where[name] = at(v, flow)
	default: // point at the key, for the errors of fields within
		w.where[name] = at(k, flow)
	}
	return false
}

// fail reports a field that failed to decode.
func (w *walker) fail(field string, v *yaml.Node, flow bool, format string, args ...any) {
	w.failed[field] = true
	w.errorf(at(v, flow), field, format, args...)
}

// str is the text of a scalar; ok is false (and the error reported) for
// anything else.
func (w *walker) str(field string, v *yaml.Node, flow bool) (s string, ok bool) {
	if v.Kind != yaml.ScalarNode {
		w.fail(field, v, flow, "%s: want a string", kindName(v))
		return "", false
	}
	return v.Value, true
}

func (w *walker) rate(field string, v *yaml.Node, flow bool) Rate {
	s, ok := w.str(field, v, flow)
	if !ok {
		return Rate{}
	}
	r, err := ParseRate(s)
	if err != nil {
		w.fail(field, v, flow, "%v", err)
	}
	return r
}

// total is a rate, or "off" or "" for no cap: the zero Rate.
func (w *walker) total(field string, v *yaml.Node, flow bool) Rate {
	if v.Kind == yaml.ScalarNode && (v.Value == "off" || v.Value == "") {
		return Rate{}
	}
	if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" {
		if _, err := ParseRate(v.Value); err != nil {
			if hint := suggest.Hint(v.Value, []string{"off"}); hint != "" {
				w.fail(field, v, flow, "%v%s", err, hint) // total: of
				return Rate{}
			}
		}
	}
	return w.rate(field, v, flow)
}

func (w *walker) integer(field string, v *yaml.Node, flow bool) int {
	var i int
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" {
		w.fail(field, v, flow, "%s: want a whole number", kindName(v))
	} else if err := v.Decode(&i); err != nil {
		w.fail(field, v, flow, "%s: out of range", kindName(v))
	}
	return i
}

func (w *walker) boolean(field string, v *yaml.Node, flow bool) bool {
	var b bool
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
		w.fail(field, v, flow, "%s: want true or false", kindName(v))
	}
	return b
}

func (w *walker) duration(field string, v *yaml.Node, flow bool) time.Duration {
	s, ok := w.str(field, v, flow)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		w.fail(field, v, flow, "%q: %s", s, suggest.WantDuration(s))
	}
	return d
}

func (w *walker) budget(field string, v *yaml.Node, flow bool) Budget {
	if v.Kind != yaml.ScalarNode {
		w.fail(field, v, flow, "%s: %s", kindName(v), budgetWant)
		return 0
	}
	b, err := ParseBudget(v.Value)
	if err != nil {
		w.fail(field, v, flow, "%v", err)
	}
	return b
}

// block decodes a block's value v (key k) at path name: a null (see
// field), a mapping whose fields fn decodes into a T, or a scalar that
// scalar makes a T of (ok false: refused). Anything else is reported and
// leaves the block out.
func block[T any](w *walker, name string, k, v *yaml.Node, flow bool, known []string,
	scalar func(v *yaml.Node) (T, bool), fn func(out *T, key string, k, v *yaml.Node, flow bool)) Field[T] {
	if w.null(name, k, v, flow) {
		if w.live {
			return Null[T]()
		}
		return Field[T]{}
	}
	if v.Kind == yaml.ScalarNode && scalar != nil {
		if out, ok := scalar(v); ok {
			return Value(out)
		}
	}
	var out T
	if !w.mapping(v, flow, name+".", known, func(key string, k, v *yaml.Node, flow bool) {
		fn(&out, name+"."+key, k, v, flow)
	}) {
		w.failed[name] = true
		return Field[T]{}
	}
	return Value(out)
}

func (w *walker) deliver(k, v *yaml.Node, flow bool) Field[DeliverPatch] {
	var confirm Field[bool] // the older spelling of mode
	out := block(w, "deliver", k, v, flow, deliverFields,
		func(v *yaml.Node) (DeliverPatch, bool) { // deliver: subject
			w.where["deliver.subject"] = at(v, flow)
			return DeliverPatch{Subject: Value(v.Value)}, true
		},
		func(d *DeliverPatch, key string, k, v *yaml.Node, flow bool) {
			switch key {
			case "deliver.subject":
				d.Subject = field(w, key, k, v, flow, text[string](w))
			case "deliver.stream":
				d.Stream = field(w, key, k, v, flow, text[string](w))
			case "deliver.mode":
				d.Mode = field(w, key, k, v, flow, text[DeliverMode](w))
			case "deliver.confirm":
				confirm = field(w, key, k, v, flow, w.boolean)
			case "deliver.webhook":
				d.Webhook = field(w, key, k, v, flow, text[string](w))
			case "deliver.timeout":
				d.Timeout = field(w, key, k, v, flow, w.duration)
			}
		})
	c, ok := confirm.Get()
	if d, given := out.Get(); given && ok && !w.failed["deliver.confirm"] {
		_, mode := d.Mode.Get()
		switch {
		case mode:
			w.failed["deliver.confirm"] = true
			w.errorf(w.where["deliver.confirm"], "deliver.confirm", "give mode or confirm, not both (confirm: true is mode: confirm, the default)")
		case c:
			d.Mode = Value(DeliverConfirm)
		default:
			d.Mode = Value(DeliverPublish)
		}
		out = Value(d)
	}
	return out
}

func (w *walker) retry(k, v *yaml.Node, flow bool) Field[RetryPatch] {
	return block(w, "retry", k, v, flow, retryFields, nil, func(r *RetryPatch, key string, k, v *yaml.Node, flow bool) {
		switch key {
		case "retry.attempts":
			r.Attempts = field(w, key, k, v, flow, w.integer)
		case "retry.backoff":
			r.Backoff = field(w, key, k, v, flow, w.duration)
		case "retry.max_backoff":
			r.MaxBackoff = field(w, key, k, v, flow, w.duration)
		case "retry.deadline":
			r.Deadline = field(w, key, k, v, flow, w.duration)
		case "retry.budget":
			r.Budget = field(w, key, k, v, flow, w.budget)
		}
	})
}

func (w *walker) admit(k, v *yaml.Node, flow bool) Field[AdmitPatch] {
	return block(w, "admit", k, v, flow, admitFields,
		func(v *yaml.Node) (AdmitPatch, bool) { // admit: off
			return AdmitPatch{Off: true}, v.Value == "off" && v.ShortTag() == "!!str"
		},
		func(a *AdmitPatch, key string, k, v *yaml.Node, flow bool) {
			switch key {
			case "admit.algorithm":
				a.Algorithm = field(w, key, k, v, flow, text[string](w))
			case "admit.limit":
				a.Limit = field(w, key, k, v, flow, w.rate)
			case "admit.burst":
				a.Burst = field(w, key, k, v, flow, w.integer)
			case "admit.shadow":
				a.Shadow = field(w, key, k, v, flow, w.boolean)
			case "admit.fail":
				a.Fail = field(w, key, k, v, flow, text[Fail](w))
			}
		})
}

func (w *walker) concurrency(k, v *yaml.Node, flow bool) Field[ConcurrencyPatch] {
	return block(w, "concurrency", k, v, flow, concurrencyFields, nil, func(c *ConcurrencyPatch, key string, k, v *yaml.Node, flow bool) {
		switch key {
		case "concurrency.key":
			c.Key = field(w, key, k, v, flow, w.integer)
		case "concurrency.total":
			c.Total = field(w, key, k, v, flow, w.integer)
		}
	})
}
