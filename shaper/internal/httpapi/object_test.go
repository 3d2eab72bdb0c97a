package httpapi

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// FuzzObject holds the answers written by hand (Object, Problem.object) to
// what encoding/json writes of the same values: every string, however
// hostile (HTML, control characters, invalid UTF-8, U+2028), reads the
// same. `go test -fuzz FuzzObject ./shaper/internal/httpapi/` explores.
func FuzzObject(f *testing.F) {
	for _, s := range []string{"", "k1", `queue of key "k" is full`, "<script>&</script>", "a\x00b\x1f\u007f\n\r\t\b\f\\",
		"\xff\xfe", "\u2028\u2029", "é日本\U0001F600", "\xe2\x80", "key\xed\xa0\x80"} {
		f.Add(s, s+"x", int64(len(s)), len(s)%2 == 0)
	}
	f.Fuzz(func(t *testing.T, a, b string, n int64, flag bool) {
		p := Problem{Type: "about:blank", Title: a, Status: int(n % 1000), Detail: b, Policy: a, Key: b, ID: a, Duplicate: flag}
		if flag {
			p.RetryAfterMs, p.Deferred = &n, &flag
		}
		want, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		o := p.object()
		if got := o.Bytes(); !bytes.Equal(got, append(want, '\n')) {
			t.Fatalf("Problem %+v\nby hand:       %s\nencoding/json: %s", p, got, want)
		}

		type row struct {
			S string    `json:"s"`
			E string    `json:"e,omitempty"`
			I int64     `json:"i"`
			B bool      `json:"b"`
			T time.Time `json:"t"`
		}
		r := row{a, b, n, flag, time.Unix(n%(1<<34), n%1e9).UTC()}
		var h Object
		h.String("s", r.S)
		h.OmitEmpty("e", r.E)
		h.Int("i", r.I)
		h.Bool("b", r.B)
		h.Time("t", r.T)
		want, err = json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Bytes(); !bytes.Equal(got, append(want, '\n')) {
			t.Fatalf("by hand:       %s\nencoding/json: %s", got, want)
		}
	})
}

func TestEmptyObject(t *testing.T) {
	var o Object
	if got := string(o.Bytes()); got != "{}\n" {
		t.Fatalf("empty object: %q, want %q", got, "{}\n")
	}
}
