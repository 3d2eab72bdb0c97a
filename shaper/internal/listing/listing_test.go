package listing

import (
	"net/url"
	"strings"
	"testing"
)

func TestCursor(t *testing.T) {
	for _, c := range []Cursor{{"p", 1}, {"a:b", 18446744073709551614}, {"orders", 0}} {
		s := c.String()
		if strings.ContainsAny(s, "+/=?&") {
			t.Errorf("%+v as %q: not URL-safe", c, s)
		}
		if got, err := ParseCursor(s); err != nil || got != c {
			t.Errorf("ParseCursor(%+v as %q) = %+v, %v", c, s, got, err)
		}
	}
	// The last sequence is none a stream reaches: a forged cursor of it
	// was answered 503 with JetStream's error.
	for _, s := range []string{"", "!", "Zm9v", "OjE", "cDp4", Cursor{"emails", 18446744073709551615}.String()} { // foo, ":1", "p:x"
		if c, err := ParseCursor(s); err == nil {
			t.Errorf("ParseCursor(%q) = %+v, want an error", s, c)
		}
	}
}

func TestParse(t *testing.T) {
	if r, bad := Parse(url.Values{}); bad != "" || r.Limit != DefaultLimit || r.After != (Cursor{}) {
		t.Errorf("Parse() = %+v, %q; want the default limit from the start", r, bad)
	}
	after := Cursor{"p", 7}.String()
	if r, bad := Parse(url.Values{"limit": {"1000"}, "after": {after}}); bad != "" || r.Limit != 1000 || r.After != (Cursor{"p", 7}) {
		t.Errorf("Parse(limit 1000, after p:7) = %+v, %q", r, bad)
	}
	for _, q := range []url.Values{{"limit": {"0"}}, {"limit": {"1001"}}, {"limit": {"x"}}, {"after": {"?"}}} {
		if _, bad := Parse(q); bad == "" {
			t.Errorf("Parse(%v) took it", q)
		}
	}
}
