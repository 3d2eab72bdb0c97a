package policies

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"

	"gopkg.in/yaml.v3"
)

// ParsePatch decodes a live change: a JSON object of the fields to change,
// a JSON merge patch of the policy's JSON (see Patch). Its values are read
// as the policy file's are, with the same messages; unknown fields, values
// of the wrong type and bad values are errors naming the field's path
// ("retry.backoff"), as *Error values without a position or a policy,
// several joined with errors.Join. What the fields must be together (a
// backoff within max_backoff, an admission limit with an algorithm) is for
// Resolve to check, once the change is merged with what it changes.
func ParsePatch(data []byte) (Patch, error) {
	root, err := jsonNode(data)
	if err != nil {
		return Patch{}, &Error{Msg: "not JSON: " + err.Error()}
	}
	if root.Kind != yaml.MappingNode {
		return Patch{}, &Error{Msg: kindName(root) + ": want a JSON object of the fields to change"}
	}
	p := &parser{live: true}
	w := p.walker()
	w.policy(root, false)
	if err := joinErrors(p.errs); err != nil {
		return Patch{}, err
	}
	return w.patch, nil
}

// UnmarshalJSON implements json.Unmarshaler with ParsePatch. A JSON null
// leaves p as it is.
func (p *Patch) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	q, err := ParsePatch(b)
	if err != nil {
		return err
	}
	*p = q
	return nil
}

// UnmarshalJSON implements json.Unmarshaler: a deliver block of a Patch
// (or a subject alone), read as ParsePatch reads it.
func (d *DeliverPatch) UnmarshalJSON(b []byte) error {
	return parseBlock(b, "deliver", d, (*walker).deliver)
}

// UnmarshalJSON implements json.Unmarshaler: a retry block of a Patch,
// read as ParsePatch reads it.
func (r *RetryPatch) UnmarshalJSON(b []byte) error {
	return parseBlock(b, "retry", r, (*walker).retry)
}

// UnmarshalJSON implements json.Unmarshaler: an admit block of a Patch, or
// "off", read as ParsePatch reads it.
// UnmarshalJSON implements json.Unmarshaler: a concurrency block of a
// Patch, as ParsePatch reads it.
func (c *ConcurrencyPatch) UnmarshalJSON(b []byte) error {
	return parseBlock(b, "concurrency", c, (*walker).concurrency)
}

func (a *AdmitPatch) UnmarshalJSON(b []byte) error {
	return parseBlock(b, "admit", a, (*walker).admit)
}

// MarshalJSON implements json.Marshaler: "off", or the fields a sets.
func (a AdmitPatch) MarshalJSON() ([]byte, error) {
	if a.Off {
		return []byte(`"off"`), nil
	}
	type fields AdmitPatch
	return json.Marshal(fields(a))
}

// parseBlock decodes b into out with the walker's decoder of the block
// called name. A JSON null leaves out as it is.
func parseBlock[T any](b []byte, name string, out *T, decode func(*walker, *yaml.Node, *yaml.Node, bool) Field[T]) error {
	if string(b) == "null" {
		return nil
	}
	v, err := jsonNode(b)
	if err != nil {
		return &Error{Field: name, Msg: "not JSON: " + err.Error()}
	}
	p := &parser{live: true}
	f := decode(p.walker(), &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}, v, false)
	if err := joinErrors(p.errs); err != nil {
		return err
	}
	*out, _ = f.Get()
	return nil
}

// ParseOverride decodes a live override as the cluster stores it: the JSON
// of a Patch, or the JSON of a whole Policy, which is how releases before
// live changes were merge patches stored an override (told apart by its
// name, which a stored Patch never has). A whole Policy reads as a Patch
// that sets every field but name and deliver, which a live change cannot
// change: a total left out is no cap, an admit left out no admission
// limit, as they meant there.
func ParseOverride(data []byte) (Patch, error) {
	p, err := ParsePatch(data)
	if err != nil {
		return Patch{}, err
	}
	if _, whole := p.Name.Get(); whole {
		p.Name, p.Deliver, p.Partitions = Field[string]{}, Field[DeliverPatch]{}, Field[int]{}
		if p.Total.IsZero() {
			p.Total = Value(Rate{})
		}
		if p.Admit.IsZero() {
			p.Admit = Value(AdmitPatch{Off: true})
		}
		if p.Adapt.IsZero() {
			p.Adapt = Value(AdaptPatch{Off: true})
		}
	}
	return p, nil
}

// jsonNode parses data, one JSON value, into the YAML nodes the walker
// reads, so that a live change is read by the code that reads the policy
// file: objects become mappings, arrays sequences, and strings, numbers,
// booleans and null scalars tagged !!str, !!int or !!float, !!bool and
// !!null. The nodes have no position.
func jsonNode(data []byte) (*yaml.Node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := jsonValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("more than one JSON value")
		}
		return nil, err
	}
	return n, nil
}

func jsonValue(dec *json.Decoder) (*yaml.Node, error) {
	tok, err := dec.Token()
	if err == io.EOF {
		return nil, io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, err
	}
	scalar := func(tag, value string) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		if t == '{' {
			n.Kind, n.Tag = yaml.MappingNode, "!!map"
		}
		for dec.More() {
			if n.Kind == yaml.MappingNode {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := k.(string) // the decoder takes nothing else as a key
				n.Content = append(n.Content, scalar("!!str", key))
			}
			v, err := jsonValue(dec)
			if err != nil {
				return nil, err
			}
			n.Content = append(n.Content, v)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		n := scalar("!!str", t)
		n.Style = yaml.DoubleQuotedStyle
		return n, nil
	case json.Number:
		if strings.ContainsAny(t.String(), ".eE") {
			return scalar("!!float", t.String()), nil
		}
		return scalar("!!int", t.String()), nil
	case bool:
		if t {
			return scalar("!!bool", "true"), nil
		}
		return scalar("!!bool", "false"), nil
	}
	return scalar("!!null", "null"), nil
}
