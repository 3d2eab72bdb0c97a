package policies

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"strings"
)

// Error is a problem with a policy file or with one policy. Parse and Load
// return it (several of them joined with errors.Join, first line first);
// Policy.Validate and Set.With return it without a position. Match it with
// errors.As.
type Error struct {
	// File is the file name given to Parse or Load; empty for a policy
	// validated on its own.
	File string
	// Line is the 1-based line of the offending YAML node; 0 when unknown.
	Line int
	// Column is the 1-based column, set only where the line alone does not
	// point at the value: inside a flow collection such as
	// "retry: {attempts: 0, backoff: 1s}". 0 otherwise.
	Column int
	// Policy is the name of the policy the problem is in, when known.
	Policy string
	// Field is the YAML path of the offending field within the policy, such
	// as "outflow" or "retry.backoff"; for an unknown field, the path of the
	// mapping it is in. Empty for problems with the file or with a policy as
	// a whole.
	Field string
	// Msg says what is wrong and, where it helps, what is wanted.
	Msg string
}

// Error formats e as "file:line: policy "name": field: msg", leaving out the
// parts that are not known.
func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		b.WriteString(e.File)
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(e.Column))
		}
		b.WriteString(": ")
	case e.File != "":
		b.WriteString(e.File)
		b.WriteString(": ")
	case e.Line > 0:
		b.WriteString("line ")
		b.WriteString(strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteString(", column ")
			b.WriteString(strconv.Itoa(e.Column))
		}
		b.WriteString(": ")
	}
	if e.Policy != "" {
		b.WriteString("policy ")
		b.WriteString(strconv.Quote(e.Policy))
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// maxErrors bounds how many problems one Parse reports.
const maxErrors = 20

// joinErrors sorts errs by position and joins them; nil when errs is empty.
// The sort is stable, so problems found on one line keep their order.
func joinErrors(errs []*Error) error {
	if len(errs) == 0 {
		return nil
	}
	slices.SortStableFunc(errs, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column))
	})
	if len(errs) == 1 {
		return errs[0]
	}
	if len(errs) > maxErrors {
		more := len(errs) - maxErrors
		errs = append(errs[:maxErrors:maxErrors], &Error{File: errs[0].File, Msg: "and " + strconv.Itoa(more) + " more"})
	}
	list := make([]error, len(errs))
	for i, e := range errs {
		list[i] = e
	}
	return errors.Join(list...)
}

// Named gives each problem of err that names no policy (a patch's, read
// on its own by ParsePatch) the policy name, so that it reads as the same
// problem found in the policy file does: policy "name": field: what. It
// returns err.
func Named(name string, err error) error {
	list := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	}
	for _, e := range list {
		if pe := (*Error)(nil); errors.As(e, &pe) && pe.Policy == "" {
			pe.Policy = name
		}
	}
	return err
}
