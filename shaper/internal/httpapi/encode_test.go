package httpapi

import (
	"bytes"
	"encoding/json"
	"testing"
)

// oddStrings are strings encoding/json escapes: quotes, backslashes, HTML
// characters, control characters, non-ASCII, invalid UTF-8, U+2028.
var oddStrings = []string{"", "k1", "\b\f\x1f\x7f", `a"b`, `a\b`, "<script>&", "tab\there\n", "ключ", "\xff\xfe", "line\u2028sep", "\x00"}

// TestProblemJSONMatchesEncodingJSON checks that the hand-written encoding
// of a problem is byte for byte json.Encoder's, every optional member
// present and absent.
func TestProblemJSONMatchesEncodingJSON(t *testing.T) {
	ms, yes, no := int64(1040), true, false
	var problems []Problem
	for _, s := range oddStrings {
		problems = append(problems,
			Problem{Type: "about:blank", Title: "Too Many Requests", Status: 429, Detail: s, Policy: s, Key: s, RetryAfterMs: &ms, ID: s, Deferred: &no},
			Problem{Type: s, Title: s, Status: 503, Deferred: &yes},
			Problem{Status: 404, Key: s})
	}
	for _, p := range problems {
		var want bytes.Buffer
		if err := json.NewEncoder(&want).Encode(p); err != nil {
			t.Fatal(err)
		}
		if got := p.appendJSON(nil); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("appendJSON(%+v) = %s, want %s", p, got, want.Bytes())
		}
	}
}

// FuzzAppendString checks AppendString against json.Marshal on any
// string.
func FuzzAppendString(f *testing.F) {
	for _, s := range oddStrings {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendString([]byte("x"), s); !bytes.Equal(got, append([]byte("x"), want...)) {
			t.Errorf("AppendString(%q) = %s, want x%s", s, got, want)
		}
	})
}
