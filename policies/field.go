package policies

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/shaper-dev/shaper/internal/suggest"
)

// presence is what a Field holds: nothing, null, or a value.
type presence uint8

const (
	absent presence = iota // the zero Field: left out
	null                   // null: reset to the file's value, or the default
	given                  // a value
)

// Field is one field of a Patch, with explicit presence: absent (the zero
// Field: the field is left out and keeps its value), null (the field is
// reset: to the policy file's value, or to the default when the file leaves
// it out) or a value. Build one with Value or Null.
//
// In JSON an absent Field is left out (its struct tag says omitzero), a
// null Field is null and a value is written as the policy file writes it:
// durations as "1m30s", rates as "20/s", budgets as "20%".
type Field[T any] struct {
	has presence
	v   T
}

// Value returns a Field that sets its field to v.
func Value[T any](v T) Field[T] { return Field[T]{has: given, v: v} }

// Null returns a Field that resets its field: back to the policy file's
// value, or to the default when the file leaves the field out.
func Null[T any]() Field[T] { return Field[T]{has: null} }

// Get returns the value f sets, and whether it sets one (false when f is
// absent or null).
func (f Field[T]) Get() (T, bool) { return f.v, f.has == given }

// IsNull reports whether f resets its field.
func (f Field[T]) IsNull() bool { return f.has == null }

// IsZero reports whether f is absent: it leaves its field as it is. It is
// what the omitzero struct tag option asks.
func (f Field[T]) IsZero() bool { return f.has == absent }

// or returns the value f sets, or def when it sets none.
func (f Field[T]) or(def T) T {
	if f.has == given {
		return f.v
	}
	return def
}

// MarshalJSON implements json.Marshaler: null for a null (or absent)
// Field, else the value, a time.Duration as its string ("1m30s").
func (f Field[T]) MarshalJSON() ([]byte, error) {
	if f.has != given {
		return []byte("null"), nil
	}
	if d, ok := any(f.v).(time.Duration); ok {
		return json.Marshal(d.String())
	}
	return json.Marshal(f.v)
}

// UnmarshalJSON implements json.Unmarshaler: null makes f null (encoding/json
// hands a non-pointer field its null), anything else its value, a
// time.Duration from a string such as "1m30s".
func (f *Field[T]) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*f = Null[T]()
		return nil
	}
	var v T
	if d, ok := any(&v).(*time.Duration); ok {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("%s: %s", b, suggest.WantDuration(string(b)))
		}
		p, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%q: %s", s, suggest.WantDuration(s))
		}
		*d = p
	} else if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = Value(v)
	return nil
}

// merge is field a with field b applied as a JSON merge patch: b's value
// when it has one, nothing when b is null, a's value (never a null) when b
// leaves the field out.
func merge[T any](a, b Field[T]) Field[T] {
	switch b.has {
	case given:
		return b
	case null:
		return Field[T]{}
	}
	if a.has == null {
		return Field[T]{}
	}
	return a
}

// blockPatch is a patch of one block of a policy (deliver, retry, admit).
type blockPatch[T any] interface {
	merge(T) T // the block with another applied as a merge patch
	empty() bool
}

// mergeBlock is merge for a block: a block of b is merged into a's
// block (into an empty one when a has none), so that a block names only
// what it changes. An empty result is left out.
func mergeBlock[T blockPatch[T]](a, b Field[T]) Field[T] {
	var out T
	switch {
	case b.has == null:
		return Field[T]{}
	case b.has == given && a.has == given:
		out = a.v.merge(b.v)
	case b.has == given:
		out = out.merge(b.v)
	case a.has == given:
		out = out.merge(a.v)
	default:
		return Field[T]{}
	}
	if out.empty() {
		return Field[T]{}
	}
	return Value(out)
}

// path appends name to paths when f is not absent.
func path[T any](paths []string, name string, f Field[T]) []string {
	if f.has != absent {
		paths = append(paths, name)
	}
	return paths
}
