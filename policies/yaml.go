package policies

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// decodeYAML decodes data into its document's root node; nil for an empty
// document. More documents are an error, unless they are empty. A panic in
// the YAML decoder is turned into an error.
func decodeYAML(data []byte) (root *yaml.Node, err error) {
	defer func() {
		if v := recover(); v != nil {
			root, err = nil, fmt.Errorf("yaml: internal error: %v", v)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var doc yaml.Node
		if err := dec.Decode(&doc); err == io.EOF {
			return root, nil
		} else if err != nil {
			return nil, err
		}
		if len(doc.Content) == 0 || isNull(doc.Content[0]) {
			continue
		}
		if root != nil {
			return nil, &Error{Line: doc.Line, Msg: "a second YAML document: put all policies in one list"}
		}
		root = doc.Content[0]
	}
}

// yamlMsg is a yaml.v3 error message without its unreliable line number.
func yamlMsg(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.Index(rest, ": "); i > 0 {
			if _, err := strconv.Atoi(rest[:i]); err == nil {
				msg = rest[i+2:]
			}
		}
	}
	return "yaml: " + msg
}

// tabHint says, of a syntax error on a line holding a tab, that YAML
// indents with spaces only: yaml.v3 says only "found character that cannot
// start any token".
func tabHint(data []byte, line int) string {
	lines := bytes.Split(data, []byte("\n"))
	if line < 1 || line > len(lines) || !bytes.ContainsRune(lines[line-1], '\t') {
		return ""
	}
	return " (the line holds a tab: YAML indents with spaces only)"
}

// syntaxLine finds the line of a YAML syntax error. yaml.v3 reports the line
// of the enclosing construct, off by one at times, or none at all; instead
// this finds the shortest run of leading lines of data that fails with the
// same message: the error is on its last line.
func syntaxLine(data []byte, err error) int {
	want := yamlMsg(err)
	var ends []int // ends[i] is the length of the first i+1 lines
	for i, c := range data {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] != len(data) {
		ends = append(ends, len(data))
	}
	fails := func(n int) bool {
		_, err := decodeYAML(data[:ends[n-1]])
		var ee *Error
		return err != nil && !errors.As(err, &ee) && yamlMsg(err) == want
	}
	lo, hi := 1, len(ends)
	for lo < hi {
		mid := lo + (hi-lo)/2
		if fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// deref follows aliases to the node they stand for.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n != nil && n.Kind == yaml.AliasNode {
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = deref(n)
	return n == nil || n.Kind == 0 || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// kindName describes n for errors: "a mapping", "a list", "null", or a
// scalar's quoted text.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return "null"
		}
		return strconv.Quote(n.Value)
	}
	return "nothing"
}
