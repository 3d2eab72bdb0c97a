package policies

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain/adapt"
)

func TestParseAdapt(t *testing.T) {
	const file = `policies:
  - name: tenants
    outflow: 50/s
    queue: 100
    adapt: {per: key, floor: 2/s, latency: 200ms, tolerance: 2}
  - name: shared
    outflow: 10/s
    total: 50/s
    queue: 100
    adapt:
      per: policy
  - name: defaults
    outflow: 20/s
    queue: 100
    adapt: {}
  - name: fixed
    outflow: 20/s
    queue: 100
`
	set, err := Parse("policies.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]*Adapt{
		"tenants":  {Per: AdaptPerKey, Floor: Rate{2, time.Second}, Latency: 200 * time.Millisecond, Tolerance: 2},
		"shared":   {Per: AdaptPerPolicy, Tolerance: DefaultAdaptTolerance},
		"defaults": {Per: AdaptPerKey, Tolerance: DefaultAdaptTolerance},
		"fixed":    nil,
	} {
		p, _ := set.Lookup(name)
		if !reflect.DeepEqual(p.Adapt, want) {
			t.Errorf("policy %s: Adapt = %+v, want %+v", name, p.Adapt, want)
		}
		// JSON round trip, as GET /v1/policies writes it.
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var back Policy
		if err := json.Unmarshal(b, &back); err != nil || !reflect.DeepEqual(back.Adapt, want) {
			t.Errorf("policy %s: JSON %s reads back as %+v, %v; want %+v", name, b, back.Adapt, err, want)
		}
	}
	p, _ := set.Lookup("tenants")
	if b, _ := json.Marshal(p.Adapt); string(b) != `{"per":"key","floor":"2/s","latency":"200ms","tolerance":2}` {
		t.Errorf("JSON of the adapt block = %s", b)
	}
}

// A live change of the adapt block is a merge patch: it names the fields
// it changes, null resets one (or the whole block) to the file's, and
// "off" turns adaptation off whatever the file says.
func TestAdaptPatch(t *testing.T) {
	file, err := ParsePatch([]byte(`{"name": "p", "outflow": "50/s", "queue": 10, "adapt": {"floor": "5/s", "tolerance": 2}}`))
	if err != nil {
		t.Fatal(err)
	}
	apply := func(change string) *Adapt {
		t.Helper()
		q, err := ParsePatch([]byte(change))
		if err != nil {
			t.Fatalf("ParsePatch(%s) = %v", change, err)
		}
		override := Patch{}.Merge(q) // as a shaper keeps it: nulls fall back to the file
		p, err := file.Merge(override).Resolve()
		if err != nil {
			t.Fatalf("Resolve after %s = %v", change, err)
		}
		return p.Adapt
	}
	five := Rate{5, time.Second}
	for _, tc := range []struct {
		change string
		want   *Adapt
		paths  string
	}{
		{`{}`, &Adapt{Per: AdaptPerKey, Floor: five, Tolerance: 2}, ""},
		{`{"adapt": {"latency": "300ms"}}`, &Adapt{Per: AdaptPerKey, Floor: five, Latency: 300 * time.Millisecond, Tolerance: 2}, "adapt.latency"},
		{`{"adapt": {"floor": null}}`, &Adapt{Per: AdaptPerKey, Floor: five, Tolerance: 2}, "adapt.floor"}, // the file's
		{`{"adapt": null}`, &Adapt{Per: AdaptPerKey, Floor: five, Tolerance: 2}, "adapt"},
		{`{"adapt": "off"}`, nil, "adapt"},
		{`{"adapt": "on"}`, &Adapt{Per: AdaptPerKey, Floor: five, Tolerance: 2}, "adapt"}, // the file's block
	} {
		if got := apply(tc.change); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("after %s: Adapt = %+v, want %+v", tc.change, got, tc.want)
		}
		q, _ := ParsePatch([]byte(tc.change))
		if got := strings.Join(q.Paths(), " "); got != tc.paths {
			t.Errorf("ParsePatch(%s).Paths() = %q, want %q", tc.change, got, tc.paths)
		}
		b, err := json.Marshal(q)
		if err != nil {
			t.Fatal(err)
		}
		var back Patch
		if err := json.Unmarshal(b, &back); err != nil || back != q {
			t.Errorf("Patch %s: JSON %s reads back as %+v, %v", tc.change, b, back, err)
		}
	}
	// Off, then a block again: the block builds on the file's again.
	off, _ := ParsePatch([]byte(`{"adapt": "off"}`))
	on, _ := ParsePatch([]byte(`{"adapt": {}}`))
	p, err := file.Merge(Patch{}.Merge(off).Merge(on)).Resolve()
	if err != nil || !reflect.DeepEqual(p.Adapt, &Adapt{Per: AdaptPerKey, Floor: five, Tolerance: 2}) {
		t.Errorf("off then {}: %+v, %v; want the file's block", p.Adapt, err)
	}
	if _, err := ParsePatch([]byte(`{"adapt": {"tolerance": "x"}}`)); err == nil || !strings.Contains(err.Error(), "adapt.tolerance") {
		t.Errorf(`ParsePatch of a bad tolerance = %v, want an error naming adapt.tolerance`, err)
	}
}

func TestDiffAdapt(t *testing.T) {
	a := Policy{Name: "p", Outflow: Rate{50, time.Second}}
	b := a
	b.Adapt = &Adapt{Per: AdaptPerKey, Tolerance: 1.5}
	if got := Diff(a, b); len(got) != 1 || got[0].String() != "adapt off → per key (default floor 5/s, latency target 1.5 × learned baseline)" {
		t.Errorf("Diff adding adapt = %v", got)
	}
	c := b.Clone()
	c.Adapt.Floor = Rate{2, time.Second}
	if b.Adapt.Floor != (Rate{}) {
		t.Errorf("Clone shares the adapt block")
	}
	if got := Diff(b, c); len(got) != 1 || got[0].String() != "adapt.floor default → 2/s" {
		t.Errorf("Diff of a floor = %v", got)
	}
}

// An override keeps what it sets until reset, whether or not it equals the
// file's value, as outflow does; adapt "on" sets only that adaptation is
// on, so a file's change of the block's fields applies and is not held,
// while any adapt field keeps adaptation on whatever the file says.
func TestAdaptCovers(t *testing.T) {
	override := func(changes ...string) Patch {
		t.Helper()
		var p Patch
		for _, c := range changes {
			q, err := ParsePatch([]byte(c))
			if err != nil {
				t.Fatal(err)
			}
			p = p.Merge(q)
		}
		return p
	}
	for _, tc := range []struct {
		override Patch
		paths    string
		covers   map[string]bool
	}{
		{override(`{"outflow": "50/s"}`, `{"outflow": "20/s"}`), "outflow", map[string]bool{"outflow": true, "adapt": false}},
		{override(`{"adapt": "off"}`, `{"adapt": "on"}`), "adapt", map[string]bool{"adapt": true, "adapt.floor": false, "adapt.per": false}},
		{override(`{"adapt": "off"}`), "adapt", map[string]bool{"adapt": true, "adapt.floor": true}},
		{override(`{"adapt": "off"}`, `{"adapt": {"per": "key"}}`), "adapt.per", map[string]bool{"adapt": true, "adapt.per": true, "adapt.floor": false}},
		{override(`{"adapt": {"floor": "2/s"}}`), "adapt.floor", map[string]bool{"adapt": true, "adapt.floor": true, "adapt.latency": false}},
	} {
		if got := strings.Join(tc.override.Paths(), " "); got != tc.paths {
			t.Errorf("override %+v: Paths() = %q, want %q", tc.override, got, tc.paths)
		}
		for path, want := range tc.covers {
			if got := tc.override.Covers(path); got != want {
				t.Errorf("override of %s: Covers(%s) = %v, want %v", tc.paths, path, got, want)
			}
		}
	}
}

// The default floor a policy file shows (AdaptText) is the one the drain's
// adapter applies: one share, said in two packages that do not import each
// other.
func TestDefaultFloorShareAgrees(t *testing.T) {
	if DefaultAdaptFloorShare != adapt.DefaultFloorShare {
		t.Errorf("policies.DefaultAdaptFloorShare = %v, drain/adapt.DefaultFloorShare = %v: the default floor shown is not the one applied", DefaultAdaptFloorShare, adapt.DefaultFloorShare)
	}
}
