package policies

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

// encoding/json hands a non-pointer field that implements json.Unmarshaler
// its null, so a Field can tell null (reset) from a key left out (keep).
func TestFieldNullFromJSON(t *testing.T) {
	var v struct {
		A Field[int]           `json:"a"`
		B Field[int]           `json:"b"`
		C Field[int]           `json:"c"`
		D Field[time.Duration] `json:"d"`
	}
	if err := json.Unmarshal([]byte(`{"a": null, "b": 3, "d": "1m30s"}`), &v); err != nil {
		t.Fatal(err)
	}
	if !v.A.IsNull() || v.A.IsZero() {
		t.Errorf("a: null decoded as %+v, want null", v.A)
	}
	if b, ok := v.B.Get(); !ok || b != 3 {
		t.Errorf("b: 3 decoded as %+v, want the value 3", v.B)
	}
	if !v.C.IsZero() || v.C.IsNull() {
		t.Errorf("c left out decoded as %+v, want absent", v.C)
	}
	if d, ok := v.D.Get(); !ok || d != 90*time.Second {
		t.Errorf(`d: "1m30s" decoded as %+v, want 90s`, v.D)
	}
	b, err := json.Marshal(struct {
		A Field[int]           `json:"a,omitzero"`
		B Field[int]           `json:"b,omitzero"`
		C Field[int]           `json:"c,omitzero"`
		D Field[time.Duration] `json:"d,omitzero"`
	}(v))
	if err != nil || string(b) != `{"a":null,"b":3,"d":"1m30s"}` {
		t.Errorf("Marshal = %s, %v; want the three given fields back", b, err)
	}
}

func TestParsePatch(t *testing.T) {
	perSec := func(n float64) Rate { return Rate{n, time.Second} }
	tests := []struct {
		in   string
		want Patch
	}{
		{`{}`, Patch{}},
		{`{"outflow": "20/s", "queue": 5}`, Patch{Outflow: Value(perSec(20)), Queue: Value(5)}},
		{`{"outflow": null, "total": null}`, Patch{Outflow: Null[Rate](), Total: Null[Rate]()}},
		{`{"total": ""}`, Patch{Total: Value(Rate{})}},
		{`{"total": "off"}`, Patch{Total: Value(Rate{})}},
		{`{"overflow": "defer"}`, Patch{Overflow: Value(OverflowDefer)}},
		{`{"retry": {"attempts": 3}}`, Patch{Retry: Value(RetryPatch{Attempts: Value(3)})}},
		{`{"retry": {"backoff": "7s", "deadline": null, "budget": "off"}}`,
			Patch{Retry: Value(RetryPatch{Backoff: Value(7 * time.Second), Deadline: Null[time.Duration](), Budget: Value(BudgetOff)})}},
		{`{"retry": {"budget": 0.25}}`, Patch{Retry: Value(RetryPatch{Budget: Value(Budget(0.25))})}},
		{`{"retry": null}`, Patch{Retry: Null[RetryPatch]()}},
		{`{"retry": {}}`, Patch{Retry: Value(RetryPatch{})}},
		{`{"admit": "off"}`, Patch{Admit: Value(AdmitPatch{Off: true})}},
		{`{"admit": null}`, Patch{Admit: Null[AdmitPatch]()}},
		{`{"admit": {"shadow": true, "burst": null}}`, Patch{Admit: Value(AdmitPatch{Shadow: Value(true), Burst: Null[int]()})}},
		{`{"deliver": "out.x"}`, Patch{Deliver: Value(DeliverPatch{Subject: Value("out.x")})}},
		{`{"deliver": {"confirm": false, "timeout": "3s"}}`, Patch{Deliver: Value(DeliverPatch{Mode: Value(DeliverPublish), Timeout: Value(3 * time.Second)})}},
		{`{"name": "orders"}`, Patch{Name: Value("orders")}},
	}
	for _, tt := range tests {
		got, err := ParsePatch([]byte(tt.in))
		if err != nil || got != tt.want {
			t.Errorf("ParsePatch(%s) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		// What it decodes to encodes back to the same patch.
		b, err := json.Marshal(got)
		if err != nil {
			t.Errorf("Marshal(%+v): %v", got, err)
			continue
		}
		if back, err := ParsePatch(b); err != nil || back != got {
			t.Errorf("ParsePatch(%s) (the encoding of %s) = %+v, %v; want %+v", b, tt.in, back, err, got)
		}
		var viaJSON Patch
		if err := json.Unmarshal([]byte(tt.in), &viaJSON); err != nil || viaJSON != got {
			t.Errorf("json.Unmarshal(%s) = %+v, %v; want %+v", tt.in, viaJSON, err, got)
		}
	}
}

func TestParsePatchErrors(t *testing.T) {
	tests := []struct {
		in    string
		field string
		want  string // the whole message of the first error
	}{
		{`not json`, "", "not JSON: invalid character 'o' in literal null (expecting 'u')"},
		{`{"outflow":`, "", "not JSON: unexpected EOF"},
		{`{} {}`, "", "not JSON: more than one JSON value"},
		{`[1]`, "", "a list: want a JSON object of the fields to change"},
		{`null`, "", "null: want a JSON object of the fields to change"},
		{`"x"`, "", `"x": want a JSON object of the fields to change`},
		{`{"color": "red"}`, "", `unknown field "color"`},
		{`{"outfow": "1/s"}`, "", `unknown field "outfow" (did you mean "outflow"?)`},
		{`{"outflow": "fast"}`, "outflow", `outflow: rate "fast": want N/s, N/m, N/h, N/d or N/<duration>`},
		{`{"outflow": 5}`, "outflow", `outflow: rate "5": want N/s, N/m, N/h, N/d or N/<duration>`},
		{`{"outflow": {"n": 5}}`, "outflow", "outflow: a mapping: want a string"},
		{`{"queue": "5"}`, "queue", `queue: "5": want a whole number`},
		{`{"queue": 5.5}`, "queue", `queue: "5.5": want a whole number`},
		{`{"queue": 99999999999999999999}`, "queue", `queue: "99999999999999999999": out of range`},
		{`{"queue": 1, "queue": 2}`, "queue", "queue: given twice"},
		{`{"total": "lots"}`, "total", `total: rate "lots": want N/s`},
		{`{"retry": 5}`, "retry", `retry: "5": want a mapping of attempts, backoff, max_backoff, deadline, budget`},
		{`{"retry": {"backoff": "7x"}}`, "retry.backoff", `retry.backoff: "7x": want a duration such as 500ms, 90s, 5m or 24h`},
		{`{"retry": {"attempts": "3"}}`, "retry.attempts", `retry.attempts: "3": want a whole number`},
		{`{"retry": {"budget": "120%"}}`, "retry.budget", `retry.budget: "120%": want a share above 0% and at most 100%, such as 20% or 0.2, or off`},
		{`{"retry": {"bakoff": "1s"}}`, "retry", `retry: unknown field "bakoff" (did you mean "backoff"?)`},
		{`{"admit": "on"}`, "admit", `admit: "on": want off or a mapping of algorithm, limit, burst, shadow, fail`},
		{`{"admit": {"shadow": "yes"}}`, "admit.shadow", `admit.shadow: "yes": want true or false`},
		{`{"admit": {"limit": "often"}}`, "admit.limit", `admit.limit: rate "often"`},
		{`{"deliver": {"timeout": 5}}`, "deliver.timeout", `deliver.timeout: "5": want a duration`},
		{`{"deliver": {"mode": "publish", "confirm": true}}`, "deliver.confirm", "deliver.confirm: give mode or confirm, not both"},
	}
	for _, tt := range tests {
		p, err := ParsePatch([]byte(tt.in))
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("ParsePatch(%s) = %+v, %v; want an *Error", tt.in, p, err)
			continue
		}
		if p != (Patch{}) || e.Field != tt.field || e.Line != 0 || e.File != "" || !strings.HasPrefix(e.Error(), tt.want) {
			t.Errorf("ParsePatch(%s) = %+v, error %q (field %q, line %d); want the empty Patch and %q (field %q)", tt.in, p, e, e.Field, e.Line, tt.want, tt.field)
		}
	}
	// Every problem is reported, in the order given.
	_, err := ParsePatch([]byte(`{"queue": "x", "retry": {"backoff": "7x", "deadline": "soon"}, "colour": 1}`))
	want := `queue: "x": want a whole number
retry.backoff: "7x": want a duration such as 500ms, 90s, 5m or 24h
retry.deadline: "soon": want a duration such as 500ms, 90s, 5m or 24h
unknown field "colour"; want one of outflow, queue, overflow, total, retry, admit, adapt, concurrency`
	if err == nil || err.Error() != want {
		t.Errorf("ParsePatch with four problems = %v, want\n%s", err, want)
	}
}

// Merge is RFC 7396 over the fields of a policy.
func TestMerge(t *testing.T) {
	parse := func(s string) Patch {
		t.Helper()
		p, err := ParsePatch([]byte(s))
		if err != nil {
			t.Fatalf("ParsePatch(%s): %v", s, err)
		}
		return p
	}
	tests := []struct{ target, patch, want string }{
		{`{"outflow": "1/s"}`, `{"outflow": "2/s"}`, `{"outflow": "2/s"}`},       // replace
		{`{"outflow": "1/s"}`, `{"queue": 3}`, `{"outflow": "1/s", "queue": 3}`}, // add, keep
		{`{"outflow": "1/s", "queue": 3}`, `{"queue": null}`, `{"outflow": "1/s"}`},
		{`{}`, `{"queue": null}`, `{}`}, // removing what is not there
		{`{"retry": {"attempts": 5, "backoff": "7s"}}`, `{"retry": {"attempts": 3}}`, `{"retry": {"attempts": 3, "backoff": "7s"}}`},
		{`{"retry": {"attempts": 5, "backoff": "7s"}}`, `{"retry": {"backoff": null}}`, `{"retry": {"attempts": 5}}`},
		{`{"retry": {"attempts": 5}}`, `{"retry": {"attempts": null}}`, `{}`}, // an empty block is left out
		{`{"retry": {"attempts": 5}}`, `{"retry": null}`, `{}`},
		{`{}`, `{"retry": {"attempts": 3, "backoff": null}}`, `{"retry": {"attempts": 3}}`}, // nulls in a new block vanish
		{`{"retry": {"attempts": 3}}`, `{"retry": {}}`, `{"retry": {"attempts": 3}}`},
		{`{"admit": {"limit": "1/s", "shadow": true}}`, `{"admit": "off"}`, `{"admit": "off"}`},
		{`{"admit": "off"}`, `{"admit": {"limit": "2/s", "burst": null}}`, `{"admit": {"limit": "2/s"}}`},
		{`{"admit": "off"}`, `{"admit": null}`, `{}`},
		{`{"total": "5/s"}`, `{"total": "off"}`, `{"total": ""}`},
		{`{"outflow": null}`, `{}`, `{}`}, // a target's nulls are nothing
	}
	for _, tt := range tests {
		got := parse(tt.target).Merge(parse(tt.patch))
		if want := parse(tt.want); got != want {
			b, _ := json.Marshal(got)
			t.Errorf("Merge(%s, %s) = %s, want %s", tt.target, tt.patch, b, tt.want)
		}
	}
	// Merging is associative for patches without nulls: a file, then two
	// changes, is the file merged with the merge of the changes.
	file := parse(`{"name": "a", "outflow": "1/s", "queue": 2, "retry": {"attempts": 5, "backoff": "7s", "deadline": "2h", "budget": "off"}}`)
	one, two := parse(`{"retry": {"attempts": 3}}`), parse(`{"queue": 9, "retry": {"deadline": "1h"}}`)
	if a, b := file.Merge(one).Merge(two), file.Merge(one.Merge(two)); a != b {
		t.Errorf("(file ⊕ one) ⊕ two = %+v, file ⊕ (one ⊕ two) = %+v", a, b)
	}
}

func TestPatchPaths(t *testing.T) {
	p, err := ParsePatch([]byte(`{"total": null, "queue": 3, "retry": {"attempts": 3, "budget": null}, "admit": "off"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.Paths(), " "); got != "queue total retry.attempts retry.budget admit" {
		t.Errorf("Paths() = %s", got)
	}
	for path, want := range map[string]bool{"queue": true, "retry.attempts": true, "retry.backoff": false, "admit.limit": true, "admit": true, "outflow": false, "retry": false} {
		if p.Covers(path) != want {
			t.Errorf("Covers(%s) = %v, want %v", path, !want, want)
		}
	}
	if (Patch{}).IsEmpty() != true || p.IsEmpty() || !(Patch{Retry: Value(RetryPatch{})}).IsEmpty() {
		t.Error("IsEmpty is wrong")
	}
}

// A policy file's Patch holds exactly what the file says, and resolves to
// the policy Parse returns.
func TestSetPatch(t *testing.T) {
	set, err := Parse("p.yaml", []byte(`
policies:
  - name: orders
    outflow: 20/s
    queue: 100
    overflow: ~
    total: off
    retry: {attempts: 5, backoff: 7s, deadline: 2h, budget: off}
  - name: emails
    outflow: 5/s
    queue: 10
    deliver: {webhook: "http://x/", confirm: null}
    admit: off
`))
	if err != nil {
		t.Fatal(err)
	}
	want := Patch{
		Name:    Value("orders"),
		Outflow: Value(Rate{20, time.Second}),
		Queue:   Value(100),
		Total:   Value(Rate{}),
		Retry:   Value(RetryPatch{Attempts: Value(5), Backoff: Value(7 * time.Second), Deadline: Value(2 * time.Hour), Budget: Value(BudgetOff)}),
	}
	if got, ok := set.Patch("orders"); !ok || got != want {
		t.Errorf("Patch(orders) = %+v, %v; want %+v", got, ok, want)
	}
	for _, p := range set.Policies() {
		patch, _ := set.Patch(p.Name)
		resolved, err := patch.Resolve()
		resolved.Line = p.Line
		if err != nil || !reflect.DeepEqual(resolved, p) {
			t.Errorf("Patch(%s).Resolve() = %+v, %v; want %+v", p.Name, resolved, err, p)
		}
	}
	if p, _ := set.Lookup("emails"); p.Admit != nil || !p.Total.IsZero() {
		t.Errorf("emails = %+v, want no admission limit (admit: off) and no total", p)
	}
	if _, ok := set.Patch("nope"); ok {
		t.Error("Patch(nope) found one")
	}
}
