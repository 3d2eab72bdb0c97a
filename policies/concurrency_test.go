package policies

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestConcurrencyParse(t *testing.T) {
	const head = "policies:\n  - name: orders\n    outflow: 20/s\n    queue: 100\n" // lines 1-4
	set, err := Parse("p.yaml", []byte(head+"    concurrency: {key: 2, total: 8}\n  - name: plain\n    outflow: 1/s\n    queue: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := set.Lookup("orders"); p.Concurrency != (Concurrency{Key: 2, Total: 8}) {
		t.Errorf("orders: Concurrency = %+v, want key 2, total 8", p.Concurrency)
	}
	if p, _ := set.Lookup("plain"); p.Concurrency != (Concurrency{Key: DefaultConcurrencyKey}) {
		t.Errorf("plain: Concurrency = %+v, want the default: key 1, no total", p.Concurrency)
	}

	tests := []struct {
		name, in string
		line     int
		field    string
		msg      string
	}{
		{"key zero", "    concurrency:\n      key: 0\n", 6, "concurrency.key", "0: want a whole number from 1 to 10000"},
		{"key negative", "    concurrency: {key: -1}\n", 5, "concurrency.key", "-1: want a whole number from 1 to 10000"},
		{"key too big", "    concurrency: {key: 10001}\n", 5, "concurrency.key", "10001: want a whole number from 1 to 10000"},
		{"key text", "    concurrency:\n      key: many\n", 6, "concurrency.key", `"many": want a whole number`},
		{"total zero", "    concurrency:\n      total: 0\n", 6, "concurrency.total", "0: want a whole number from 1 to 10000 (leave it out for no bound)"},
		{"total too big", "    concurrency: {total: 20000}\n", 5, "concurrency.total", "20000: want a whole number from 1 to 10000"},
		{"key above total", "    concurrency:\n      key: 5\n      total: 4\n", 6, "concurrency.key", "5: more than concurrency.total (4)"},
		{"not a block", "    concurrency: 3\n", 5, "concurrency", "want a mapping"},
		{"unknown field", "    concurrency: {keys: 3}\n", 5, "concurrency", `unknown field "keys" (did you mean "key"?)`},
	}
	for _, tt := range tests {
		_, err := Parse("p.yaml", []byte(head+tt.in))
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: Parse = %v, want an *Error", tt.name, err)
			continue
		}
		if e.Line != tt.line || e.Field != tt.field || !strings.Contains(e.Msg, tt.msg) {
			t.Errorf("%s: Parse = line %d field %q %q, want line %d field %q containing %q", tt.name, e.Line, e.Field, e.Msg, tt.line, tt.field, tt.msg)
		}
	}
}

func TestConcurrencyPatch(t *testing.T) {
	file, err := ParsePatch([]byte(`{"name": "a", "outflow": "1/s", "queue": 5, "concurrency": {"key": 3, "total": 9}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		change string
		want   Concurrency
		paths  string
	}{
		{`{"concurrency": {"key": 2}}`, Concurrency{Key: 2, Total: 9}, "concurrency.key"},
		{`{"concurrency": {"total": null}}`, Concurrency{Key: 3}, "concurrency.total"},
		{`{"concurrency": null}`, Concurrency{Key: DefaultConcurrencyKey}, "concurrency"},
		{`{"queue": 6}`, Concurrency{Key: 3, Total: 9}, "queue"},
	} {
		change, err := ParsePatch([]byte(tt.change))
		if err != nil {
			t.Fatalf("ParsePatch(%s) = %v", tt.change, err)
		}
		if got := strings.Join(change.Paths(), " "); got != tt.paths {
			t.Errorf("ParsePatch(%s).Paths() = %s, want %s", tt.change, got, tt.paths)
		}
		p, err := file.Merge(change).Resolve()
		if err != nil {
			t.Fatalf("Resolve after %s = %v", tt.change, err)
		}
		if p.Concurrency != tt.want {
			t.Errorf("after %s: Concurrency = %+v, want %+v", tt.change, p.Concurrency, tt.want)
		}
	}
	var c ConcurrencyPatch
	if err := json.Unmarshal([]byte(`{"key": 0}`), &c); err != nil {
		t.Fatalf("Unmarshal of a concurrency block = %v", err)
	}
	if _, err := file.Merge(Patch{Concurrency: Value(c)}).Resolve(); err == nil || !strings.Contains(err.Error(), "concurrency.key: 0") {
		t.Errorf("Resolve with key 0 = %v, want concurrency.key refused", err)
	}
	if _, err := ParsePatch([]byte(`{"concurrency": {"key": "2"}}`)); err == nil {
		t.Errorf(`ParsePatch with key "2" = nil, want a whole number asked for`)
	}
}

func TestConcurrencyJSONAndDiff(t *testing.T) {
	p, err := Patch{Name: Value("a"), Outflow: Value(Rate{1, 1e9}), Queue: Value(1),
		Concurrency: Value(ConcurrencyPatch{Key: Value(2), Total: Value(4)})}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil || !strings.Contains(string(b), `"concurrency":{"key":2,"total":4}`) {
		t.Errorf("json.Marshal = %s, %v; want the concurrency block", b, err)
	}
	var back Policy
	if err := json.Unmarshal(b, &back); err != nil || back.Concurrency != p.Concurrency {
		t.Errorf("round trip = %+v, %v; want %+v", back.Concurrency, err, p.Concurrency)
	}
	q := p
	q.Concurrency = Concurrency{Key: 1}
	want := []Change{{"concurrency.key", "2", "1"}, {"concurrency.total", "4", "none"}}
	if got := Diff(p, q); !reflect.DeepEqual(got, want) {
		t.Errorf("Diff = %v, want %v", got, want)
	}
}

// partitions left out is 1 partition: a file that adds "partitions: 4"
// changes 1 → 4, not 0 → 4 (a tour read "partitions 0 → 4" in status).
func TestDiffPartitionsDefault(t *testing.T) {
	a := Policy{Name: "p", Outflow: Rate{N: 1, Per: time.Second}, Queue: 1}
	b := a
	b.Partitions = 4
	if got := fmt.Sprint(Diff(a, b)); got != "[partitions 1 → 4]" {
		t.Errorf("Diff(no partitions, 4) = %s, want [partitions 1 → 4]", got)
	}
	b.Partitions = 1
	if d := Diff(a, b); len(d) != 0 {
		t.Errorf("Diff(no partitions, 1) = %v, want none", d)
	}
}
