package policies

import (
	"fmt"
	"strings"
)

// Set is a validated collection of policies with unique names, in file
// order. A Set is immutable: With returns a new Set. It is safe for
// concurrent use. The zero Set is empty.
type Set struct {
	list    []Policy
	patches []Patch        // what the file (or With) gave of each policy of list
	index   map[string]int // name → position in list
}

// Policies returns the policies of s in file order (policies added by With
// come last). The slice and the policies are copies: changing them does not
// change s.
func (s *Set) Policies() []Policy {
	if s == nil || len(s.list) == 0 {
		return nil
	}
	out := make([]Policy, len(s.list))
	for i, p := range s.list {
		out[i] = p.Clone()
	}
	return out
}

// Lookup returns a copy of the policy named name, and whether there is one.
// Names are matched exactly.
func (s *Set) Lookup(name string) (Policy, bool) {
	if s == nil {
		return Policy{}, false
	}
	i, ok := s.index[name]
	if !ok {
		return Policy{}, false
	}
	return s.list[i].Clone(), true
}

// Patch returns what the policy file gives of the policy named name: the
// fields it sets, as a Patch whose Resolve is the policy Lookup returns
// (but for the Line). For a policy added by With, the fields of the Policy
// given that are not zero, and those without a default. The second result
// is false when s has no such policy.
func (s *Set) Patch(name string) (Patch, bool) {
	if s == nil {
		return Patch{}, false
	}
	i, ok := s.index[name]
	if !ok {
		return Patch{}, false
	}
	return s.patches[i], true
}

// With returns a copy of s in which p replaces the policy of the same name,
// or is added at the end when there is none; s itself is not changed. The
// fields of p that have a default and are zero are left out: p is read as
// a Patch of its other fields, resolved as Parse resolves a policy of the
// file (Patch.Resolve); p must pass Validate then, and its name must not
// differ only in case from another policy's. The errors are *Error values, without a
// file position. With keeps p.Line as given.
func (s *Set) With(p Policy) (*Set, error) {
	patch := patchOf(p)
	resolved, errs := patch.resolve()
	if len(errs) > 0 {
		for _, e := range errs {
			e.Policy = p.Name
		}
		return nil, joinErrors(errs)
	}
	resolved.Line = p.Line
	p = resolved
	var list []Policy
	var patches []Patch
	if s != nil {
		list, patches = s.list, s.patches
		for _, q := range list {
			if q.Name != p.Name && strings.EqualFold(q.Name, p.Name) {
				return nil, &Error{Policy: p.Name, Field: "name", Msg: fmt.Sprintf("%q differs only in case from %q", p.Name, q.Name)}
			}
		}
	}
	next := &Set{
		list:    make([]Policy, len(list), len(list)+1),
		patches: make([]Patch, len(patches), len(list)+1),
		index:   make(map[string]int, len(list)+1),
	}
	copy(next.list, list)
	copy(next.patches, patches)
	for i, q := range next.list {
		next.index[q.Name] = i
	}
	if i, ok := next.index[p.Name]; ok {
		next.list[i], next.patches[i] = p, patch
	} else {
		next.index[p.Name] = len(next.list)
		next.list = append(next.list, p)
		next.patches = append(next.patches, patch)
	}
	return next, nil
}

// Clone returns a copy of p that shares no memory with it.
func (p Policy) Clone() Policy {
	if p.Admit != nil {
		a := *p.Admit
		p.Admit = &a
	}
	if p.Adapt != nil {
		a := *p.Adapt
		p.Adapt = &a
	}
	return p
}

// DeliveringUnder returns a policy of s that delivers over NATS to a
// subject overlapping subject (one is the other, or under it), such as a
// subject the shaper takes submissions on: false when none does.
func (s *Set) DeliveringUnder(subject string) (Policy, bool) {
	for _, p := range s.list {
		if p.Deliver.Webhook == "" && subjectsOverlap(p.DeliverSubject(), subject) {
			return p, true
		}
	}
	return Policy{}, false
}
