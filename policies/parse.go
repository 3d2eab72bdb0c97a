package policies

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Load reads the policy file at path and parses it with Parse, naming path
// in its errors.
func Load(path string) (*Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load policies: %w", err)
	}
	return Parse(path, data)
}

// Parse parses and validates a policy file, filling in defaults (see the
// package documentation for the format). filename is used only in errors.
//
// On failure Parse returns a nil Set and every problem it found as an
// *Error, joined with errors.Join and sorted by line, so that the first line
// of the message is the first problem in the file. A YAML syntax error stops
// parsing and is the only error.
func Parse(filename string, data []byte) (*Set, error) {
	root, err := decodeYAML(data)
	if err != nil {
		var ee *Error
		if errors.As(err, &ee) {
			ee.File = filename
			return nil, ee
		}
		return nil, &Error{File: filename, Line: syntaxLine(data, err), Msg: yamlMsg(err)}
	}
	p := &parser{file: filename}
	set := p.parseFile(root)
	if err := joinErrors(p.errs); err != nil {
		return nil, err
	}
	return set, nil
}

// parser walks the YAML nodes of one policy file, collecting errors.
type parser struct {
	file string
	errs []*Error
}

// pos is where a node is: its line, and its column when it is inside a flow
// collection, where the line alone is ambiguous.
type pos struct{ line, col int }

func at(n *yaml.Node, flow bool) pos {
	if flow {
		return pos{n.Line, n.Column}
	}
	return pos{n.Line, 0}
}

func (p *parser) errorf(at pos, field, format string, args ...any) *Error {
	e := &Error{File: p.file, Line: at.line, Column: at.col, Field: field, Msg: fmt.Sprintf(format, args...)}
	p.errs = append(p.errs, e)
	return e
}

// Field names, in the order the documentation gives them.
var (
	fileFields    = []string{"policies"}
	policyFields  = []string{"name", "outflow", "queue", "overflow", "total", "deliver", "retry", "admit"}
	deliverFields = []string{"subject", "stream", "mode", "confirm", "webhook", "timeout"}
	retryFields   = []string{"attempts", "backoff", "max_backoff", "deadline", "budget"}
	admitFields   = []string{"algorithm", "limit", "burst", "shadow", "fail"}
)

// parseFile walks the root node of a policy file and returns its policies,
// nil when the file has none to give (the errors say why).
func (p *parser) parseFile(root *yaml.Node) *Set {
	root = deref(root)
	if root == nil {
		p.errs = append(p.errs, &Error{File: p.file, Msg: `empty file: want a "policies:" list`})
		return nil
	}
	var list *yaml.Node
	var listKey pos
	p.mapping(root, false, "", fileFields, func(key string, k, v *yaml.Node, flow bool) {
		list, listKey = v, at(k, flow)
	})
	if root.Kind != yaml.MappingNode {
		return nil
	}
	if list == nil {
		if len(p.errs) == 0 {
			p.errorf(at(root, false), "", `no "policies:" list`)
		}
		return nil
	}
	flow := root.Style&yaml.FlowStyle != 0
	switch {
	case isNull(list):
		p.errorf(listKey, "", "no policies: the list is empty")
		return nil
	case list.Kind != yaml.SequenceNode:
		p.errorf(at(list, flow), "", `"policies" is %s: want a list of policies`, kindName(list))
		return nil
	case len(list.Content) == 0:
		p.errorf(at(list, flow), "", "no policies: the list is empty")
		return nil
	}
	flow = flow || list.Style&yaml.FlowStyle != 0
	set := &Set{index: make(map[string]int, len(list.Content))}
	seen := make(map[string]Policy) // by lower-case name
	for _, item := range list.Content {
		pol, ok := p.policy(item, flow)
		if checkName(pol.Name) != "" {
			continue
		}
		folded := strings.ToLower(pol.Name)
		if prev, dup := seen[folded]; dup {
			msg := fmt.Sprintf("%q is already defined on line %d", pol.Name, prev.Line)
			if prev.Name != pol.Name {
				msg = fmt.Sprintf("%q differs only in case from %q on line %d", pol.Name, prev.Name, prev.Line)
			}
			p.errorf(at(item, flow), "name", "%s", msg).Policy = pol.Name
			continue
		}
		seen[folded] = pol
		if !ok {
			continue
		}
		set.index[pol.Name] = len(set.list)
		set.list = append(set.list, pol)
	}
	return set
}

// policy walks one item of the policies list. ok is false when it has errors.
func (p *parser) policy(item *yaml.Node, flow bool) (pol Policy, ok bool) {
	pol.Line = item.Line
	firstErr := len(p.errs)
	// where maps a field path to the node that set it (or the key, when the
	// value is null); set holds the paths given a non-null value.
	where := map[string]pos{}
	set := map[string]bool{}
	failed := map[string]bool{}
	note := func(field string, k, v *yaml.Node, flow bool) bool {
		if isNull(v) {
			where[field] = at(k, flow)
			return false
		}
		if v.Kind == yaml.ScalarNode {
			where[field] = at(v, flow)
		} else { // point at the key, for the errors of fields within
			where[field] = at(k, flow)
		}
		set[field] = true
		return true
	}
	fail := func(field string, v *yaml.Node, flow bool, format string, args ...any) {
		failed[field] = true
		p.errorf(at(v, flow), field, format, args...)
	}
	str := func(field string, v *yaml.Node, flow bool) (string, bool) {
		if v.Kind != yaml.ScalarNode {
			fail(field, v, flow, "%s: want a string", kindName(v))
			return "", false
		}
		return v.Value, true
	}
	rate := func(field string, v *yaml.Node, flow bool) Rate {
		s, ok := str(field, v, flow)
		if !ok {
			return Rate{}
		}
		r, err := ParseRate(s)
		if err != nil {
			fail(field, v, flow, "%v", err)
		}
		return r
	}
	integer := func(field string, v *yaml.Node, flow bool) int {
		var i int
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" {
			fail(field, v, flow, "%s: want a whole number", kindName(v))
		} else if err := v.Decode(&i); err != nil {
			fail(field, v, flow, "%s: out of range", kindName(v))
		}
		return i
	}
	boolean := func(field string, v *yaml.Node, flow bool) bool {
		var b bool
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&b) != nil {
			fail(field, v, flow, "%s: want true or false", kindName(v))
		}
		return b
	}
	duration := func(field string, v *yaml.Node, flow bool) time.Duration {
		s, ok := str(field, v, flow)
		if !ok {
			return 0
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			fail(field, v, flow, "%q: want a duration such as 500ms, 90s, 5m or 24h", s)
		}
		return d
	}

	budget := func(field string, v *yaml.Node, flow bool) Budget {
		if v.Kind != yaml.ScalarNode {
			fail(field, v, flow, "%s: %s", kindName(v), budgetWant)
			return 0
		}
		b, err := ParseBudget(v.Value)
		if err != nil {
			fail(field, v, flow, "%v", err)
		}
		return b
	}

	var confirm *bool // deliver.confirm, when given
	item = deref(item)
	p.mapping(item, flow, "", policyFields, func(key string, k, v *yaml.Node, flow bool) {
		if !note(key, k, v, flow) {
			return
		}
		switch key {
		case "name":
			pol.Name, _ = str(key, v, flow)
		case "outflow":
			pol.Outflow = rate(key, v, flow)
		case "queue":
			pol.Queue = integer(key, v, flow)
		case "overflow":
			s, _ := str(key, v, flow)
			pol.Overflow = Overflow(s)
		case "total":
			pol.Total = rate(key, v, flow)
		case "deliver":
			if v.Kind == yaml.ScalarNode {
				where["deliver.subject"], set["deliver.subject"] = at(v, flow), true
				pol.Deliver.Subject = v.Value
				return
			}
			p.mapping(v, flow, "deliver.", deliverFields, func(key string, k, v *yaml.Node, flow bool) {
				key = "deliver." + key
				if !note(key, k, v, flow) {
					return
				}
				switch key {
				case "deliver.subject":
					pol.Deliver.Subject, _ = str(key, v, flow)
				case "deliver.stream":
					pol.Deliver.Stream, _ = str(key, v, flow)
				case "deliver.mode":
					s, _ := str(key, v, flow)
					pol.Deliver.Mode = DeliverMode(s)
				case "deliver.confirm":
					// The older spelling: true is mode confirm, false mode publish.
					c := boolean(key, v, flow)
					confirm = &c
				case "deliver.webhook":
					pol.Deliver.Webhook, _ = str(key, v, flow)
				case "deliver.timeout":
					pol.Deliver.Timeout = duration(key, v, flow)
				}
			})
		case "retry":
			p.mapping(v, flow, "retry.", retryFields, func(key string, k, v *yaml.Node, flow bool) {
				key = "retry." + key
				if !note(key, k, v, flow) {
					return
				}
				switch key {
				case "retry.attempts":
					pol.Retry.Attempts = integer(key, v, flow)
				case "retry.backoff":
					pol.Retry.Backoff = duration(key, v, flow)
				case "retry.max_backoff":
					pol.Retry.MaxBackoff = duration(key, v, flow)
				case "retry.deadline":
					pol.Retry.Deadline = duration(key, v, flow)
				case "retry.budget":
					pol.Retry.Budget = budget(key, v, flow)
				}
			})
		case "admit":
			a := new(Admit)
			if p.mapping(v, flow, "admit.", admitFields, func(key string, k, v *yaml.Node, flow bool) {
				key = "admit." + key
				if !note(key, k, v, flow) {
					return
				}
				switch key {
				case "admit.algorithm":
					a.Algorithm, _ = str(key, v, flow)
				case "admit.limit":
					a.Limit = rate(key, v, flow)
				case "admit.burst":
					a.Burst = integer(key, v, flow)
				case "admit.shadow":
					a.Shadow = boolean(key, v, flow)
				case "admit.fail":
					fail, _ := str(key, v, flow)
					a.Fail = Fail(fail)
				}
			}) {
				pol.Admit = a
			}
		}
	})
	if item == nil || item.Kind != yaml.MappingNode {
		return Policy{}, false
	}

	// Report required fields left out where the policy (or its admit block)
	// starts.
	required := []struct{ field, want string }{
		{"name", "want a name of letters, digits, _ and -"},
		{"outflow", "want a rate such as 20/s"},
		{"queue", fmt.Sprintf("want a whole number from %d to %d", minQueue, maxQueue)},
	}
	if pol.Admit != nil {
		required = append(required,
			struct{ field, want string }{"admit.algorithm", "want one of " + strings.Join(algorithms, ", ")},
			struct{ field, want string }{"admit.limit", "want a rate such as 600/m"})
	}
	for _, r := range required {
		if !set[r.field] && !failed[r.field] {
			w, ok := where[r.field] // the key of a null value
			if !ok && strings.HasPrefix(r.field, "admit.") {
				w, ok = where["admit"]
			}
			if !ok {
				w = at(item, flow)
			}
			failed[r.field] = true
			p.errorf(w, r.field, "missing: %s", r.want)
		}
	}

	if confirm != nil && !failed["deliver.confirm"] {
		switch {
		case set["deliver.mode"]:
			failed["deliver.confirm"] = true
			p.errorf(where["deliver.confirm"], "deliver.confirm", "give mode or confirm, not both (confirm: true is mode: confirm, the default)")
		case *confirm:
			pol.Deliver.Mode = DeliverConfirm
		default:
			pol.Deliver.Mode = DeliverPublish
		}
	}

	// Fill in the defaults of fields left out, then check the whole policy
	// with the rules Validate uses; a field that already failed to parse is
	// not reported twice.
	has := func(field string) bool { return set[field] }
	pol.fillDefaults(has)
	nameOK := !failed["name"] && checkName(pol.Name) == ""
	for _, e := range pol.validate() {
		if failed[e.Field] || e.Field == "deliver.subject" && !set["deliver.subject"] && !nameOK {
			continue
		}
		w, ok := where[e.Field]
		if !ok && e.Field == "retry.backoff" {
			w, ok = where["retry.max_backoff"]
		}
		if !ok {
			if parent, _, nested := strings.Cut(e.Field, "."); nested {
				w, ok = where[parent]
			}
		}
		if !ok {
			w = at(item, flow)
		}
		e.File, e.Line, e.Column = p.file, w.line, w.col
		p.errs = append(p.errs, e)
	}
	if nameOK {
		for _, e := range p.errs[firstErr:] {
			e.Policy = pol.Name
		}
	}
	return pol, len(p.errs) == firstErr
}

// mapping checks that n is a mapping of known fields, each given once, and
// calls fn for each. prefix is the path of n within a policy ("retry."), for
// errors. flow says whether n is inside a flow collection. It reports whether
// n was a mapping.
func (p *parser) mapping(n *yaml.Node, flow bool, prefix string, known []string, fn func(key string, k, v *yaml.Node, flow bool)) bool {
	n = deref(n)
	if n == nil {
		return false
	}
	field := strings.TrimSuffix(prefix, ".")
	if n.Kind != yaml.MappingNode {
		what := "a policy"
		switch field {
		case "":
			if len(known) == 1 { // the file itself
				what = `a "policies:" list`
			}
		case "deliver":
			what = "a NATS subject or a mapping of " + strings.Join(known, ", ")
		default:
			what = "a mapping of " + strings.Join(known, ", ")
		}
		p.errorf(at(n, flow), field, "%s: want %s", kindName(n), what)
		return false
	}
	flow = flow || n.Style&yaml.FlowStyle != 0
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k == nil || v == nil {
			continue
		}
		if k.Kind != yaml.ScalarNode {
			p.errorf(at(k, flow), field, "%s as a field name: want one of %s", kindName(k), strings.Join(known, ", "))
			continue
		}
		if k.ShortTag() == "!!merge" {
			p.errorf(at(k, flow), field, "merge keys (<<) are not supported: write the fields out")
			continue
		}
		name := k.Value
		if !slices.Contains(known, name) {
			p.errorf(at(k, flow), field, "unknown field %q%s", name, suggest(name, known))
			continue
		}
		if line, dup := seen[name]; dup {
			p.errorf(at(k, flow), prefix+name, "given twice (first on line %d)", line)
			continue
		}
		seen[name] = k.Line
		fn(name, k, v, flow)
	}
	return true
}
