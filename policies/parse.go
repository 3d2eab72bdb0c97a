package policies

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/shaper-dev/shaper/internal/suggest"
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
		line := syntaxLine(data, err)
		return nil, &Error{File: filename, Line: line, Msg: yamlMsg(err) + tabHint(data, line)}
	}
	p := &parser{file: filename}
	set := p.parseFile(root)
	if err := joinErrors(p.errs); err != nil {
		return nil, err
	}
	return set, nil
}

// parser walks the YAML nodes of one policy file, or of one live change
// (ParsePatch), collecting errors.
type parser struct {
	file string
	live bool // a live change: null resets a field, rather than leave it out
	errs []*Error
	// meant holds the paths of the fields the did-you-mean hints of
	// unknown fields named ("outfow" → "outflow"): the hint already says
	// what is wrong with such a field when it is not given.
	meant map[string]bool
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
	fileFields        = []string{"policies"}
	policyFields      = []string{"name", "outflow", "queue", "overflow", "total", "partitions", "deliver", "retry", "admit", "adapt", "concurrency"}
	deliverFields     = []string{"subject", "stream", "mode", "confirm", "webhook", "timeout"}
	retryFields       = []string{"attempts", "backoff", "max_backoff", "deadline", "budget"}
	admitFields       = []string{"algorithm", "limit", "burst", "shadow", "fail"}
	concurrencyFields = []string{"key", "total"}
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
	var subjects []Policy           // those delivering over NATS, for overlapping subjects
	for _, item := range list.Content {
		pol, patch, ok := p.policy(item, flow)
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
		if pol.Deliver.Webhook == "" {
			if prev, clash := overlapping(subjects, pol.DeliverSubject()); clash {
				p.errorf(at(item, flow), "deliver.subject", "%q overlaps policy %q's %q (line %d): each policy's consumers subscribe to <subject>.> and would take the other's jobs; give each its own",
					pol.DeliverSubject(), prev.Name, prev.DeliverSubject(), prev.Line).Policy = pol.Name
				continue
			}
			subjects = append(subjects, pol)
		}
		set.index[pol.Name] = len(set.list)
		set.list = append(set.list, pol)
		set.patches = append(set.patches, patch)
	}
	return set
}

// overlapping returns the policy of ps whose delivery subject overlaps
// subject (subjectsOverlap).
func overlapping(ps []Policy, subject string) (Policy, bool) {
	for _, p := range ps {
		if subjectsOverlap(p.DeliverSubject(), subject) {
			return p, true
		}
	}
	return Policy{}, false
}

// subjectsOverlap reports whether a and b, subject prefixes a key is
// appended to, take each other's messages: one is the other, or one's
// <prefix>.> holds the other.
func subjectsOverlap(a, b string) bool {
	return a == b || strings.HasPrefix(a, b+".") || strings.HasPrefix(b, a+".")
}

// policy walks one item of the policies list into its Patch, and resolves
// that into the Policy. ok is false when it has errors.
func (p *parser) policy(item *yaml.Node, flow bool) (pol Policy, patch Patch, ok bool) {
	line := item.Line
	firstErr := len(p.errs)
	p.meant = map[string]bool{}
	w := p.walker()
	item = deref(item)
	w.policy(item, flow)
	if item == nil || item.Kind != yaml.MappingNode {
		return Policy{}, Patch{}, false
	}

	// Resolve the Patch as any other: it reports the required fields left
	// out and checks the whole policy with the rules Validate uses. A field
	// that already failed to decode is not reported twice. Each problem is
	// placed where its field was given, else where its block or the policy
	// starts. A field left out that an unknown field's hint names is not
	// reported missing: one mistake, one error, the hint.
	pol, errs := w.patch.resolve()
	pol.Line = line
	nameOK := !w.failed["name"] && checkName(pol.Name) == ""
	for _, e := range errs {
		place, ok := w.where[e.Field]
		if w.failed[e.Field] || !ok && p.meant[e.Field] {
			continue
		}
		if !ok && e.Field == "retry.backoff" {
			place, ok = w.where["retry.max_backoff"]
		}
		if !ok {
			if parent, _, nested := strings.Cut(e.Field, "."); nested {
				place, ok = w.where[parent]
			}
		}
		if !ok {
			place = at(item, flow)
		}
		e.File, e.Line, e.Column = p.file, place.line, place.col
		p.errs = append(p.errs, e)
	}
	if nameOK {
		for _, e := range p.errs[firstErr:] {
			e.Policy = pol.Name
		}
	}
	return pol, w.patch, len(p.errs) == firstErr
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
		what, words := "a policy", []string(nil)
		switch field {
		case "":
			if len(known) == 1 { // the file itself
				what = `a "policies:" list`
			}
		case "deliver":
			what = "a NATS subject or a mapping of " + strings.Join(known, ", ")
		case "admit":
			what, words = "off or a mapping of "+strings.Join(known, ", "), []string{"off"}
		case "adapt":
			what, words = "on, off or a mapping of "+strings.Join(known, ", "), []string{"on", "off"}
		default:
			what = "a mapping of " + strings.Join(known, ", ")
		}
		hint := ""
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" {
			hint = suggest.Hint(n.Value, words)
		}
		p.errorf(at(n, flow), field, "%s: want %s%s", kindName(n), what, hint)
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
			p.errorf(at(k, flow), field, "unknown field %q%s", name, p.knownFields(name, known))
			if meant, ok := suggest.Closest(name, known); ok && p.meant != nil {
				p.meant[prefix+meant] = true
			}
			continue
		}
		if line, dup := seen[name]; dup {
			if line == 0 { // JSON: no lines
				p.errorf(at(k, flow), prefix+name, "given twice")
			} else {
				p.errorf(at(k, flow), prefix+name, "given twice (first on line %d)", line)
			}
			continue
		}
		seen[name] = k.Line
		fn(name, k, v, flow)
	}
	return true
}

// knownFields is what follows an unknown field's name: the hint of the
// field it was probably meant to be, or, when none is close, the fields
// that are known there; of a live change (a patch), those a live change
// may set.
func (p *parser) knownFields(name string, known []string) string {
	if h := suggest.Hint(name, known); h != "" {
		return h
	}
	if p.live {
		known = slices.DeleteFunc(slices.Clone(known), func(f string) bool { return slices.Contains(fixedWhileRunning, f) })
	}
	return "; want one of " + strings.Join(known, ", ")
}

// fixedWhileRunning are the policy fields a live change cannot set: the
// policy's name, and what a restart alone changes.
var fixedWhileRunning = []string{"name", "partitions", "deliver"}
