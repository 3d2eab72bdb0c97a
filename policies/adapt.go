package policies

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/shaper-dev/shaper/internal/suggest"
)

// AdaptPer says what an adaptive outflow adapts.
type AdaptPer string

const (
	// AdaptPerKey adapts each key's rate under outflow, from that key's
	// deliveries: for a downstream per key (per tenant), so that one key's
	// slow downstream slows that key alone. The default.
	AdaptPerKey AdaptPer = "key"
	// AdaptPerPolicy adapts the total cap, from the deliveries of every
	// key: for one downstream shared by every key. It needs a total.
	AdaptPerPolicy AdaptPer = "policy"
)

// Defaults of an adapt block.
const (
	DefaultAdaptPer       = AdaptPerKey // Adapt.Per
	DefaultAdaptTolerance = 1.5         // Adapt.Tolerance
	// DefaultAdaptFloorShare is the floor, as a share of the ceiling
	// (outflow, or total with per: policy), when Adapt.Floor is left out.
	DefaultAdaptFloorShare = 0.1
)

// adaptFields are the fields of an adapt block, in the order the
// documentation gives them.
var adaptFields = []string{"per", "floor", "latency", "tolerance"}

// Adapt is an adaptive outflow: outflow (per: key) or total (per: policy)
// becomes a ceiling, and the drain paces at a rate it adapts between Floor
// and that ceiling from what deliveries tell (latency, timeouts, failures,
// 429/503). See docs/adaptive.md.
type Adapt struct {
	// Per is what adapts: AdaptPerKey or AdaptPerPolicy. Default
	// DefaultAdaptPer.
	Per AdaptPer `json:"per"`
	// Floor is the lowest rate, under the ceiling; the zero Rate means
	// DefaultAdaptFloorShare of the ceiling.
	Floor Rate `json:"floor,omitzero"`
	// Latency is a target delivery latency; 0 means the learned baseline
	// (the lowest latency seen) times Tolerance.
	Latency time.Duration `json:"latency,omitempty"`
	// Tolerance is how many times the learned baseline the latency may
	// reach before the rate is lowered: above 1, at most 10. Default
	// DefaultAdaptTolerance.
	Tolerance float64 `json:"tolerance"`
}

// AdaptPatch is a change to a policy's adapt block, or with Off set (JSON
// and the policy file: adapt: off) no adaptive outflow, whatever the file
// says. adapt: on, or adapt: {}, turns it on with the defaults.
type AdaptPatch struct {
	// Off turns the adaptive outflow off; the other fields are then unset.
	Off bool `json:"-"`
	// Per, Floor, Latency and Tolerance are the fields of Adapt of the
	// same names.
	Per       Field[AdaptPer]      `json:"per,omitzero"`
	Floor     Field[Rate]          `json:"floor,omitzero"`
	Latency   Field[time.Duration] `json:"latency,omitzero"`
	Tolerance Field[float64]       `json:"tolerance,omitzero"`
	// On is set for a block given without fields: adapt: {} turns the
	// adaptive outflow on with the defaults (a block with fields turns it
	// on too).
	On bool `json:"-"`
}

// merge applies q to a; "off" is no block: q replaces it.
func (a AdaptPatch) merge(q AdaptPatch) AdaptPatch {
	if q.Off {
		return AdaptPatch{Off: true}
	}
	if a.Off {
		a = AdaptPatch{}
	}
	return AdaptPatch{
		Per:       merge(a.Per, q.Per),
		Floor:     merge(a.Floor, q.Floor),
		Latency:   merge(a.Latency, q.Latency),
		Tolerance: merge(a.Tolerance, q.Tolerance),
		On:        a.On || q.On,
	}
}

func (a AdaptPatch) empty() bool { return a == AdaptPatch{} }

// MarshalJSON implements json.Marshaler: "off", "on" for a block with no
// field, or the fields a sets.
func (a AdaptPatch) MarshalJSON() ([]byte, error) {
	if a.Off {
		return []byte(`"off"`), nil
	}
	if a == (AdaptPatch{On: true}) {
		return []byte(`"on"`), nil
	}
	type fields AdaptPatch
	return json.Marshal(fields(a))
}

// UnmarshalJSON implements json.Unmarshaler: an adapt block of a Patch, or
// "off", read as ParsePatch reads it.
func (a *AdaptPatch) UnmarshalJSON(b []byte) error {
	return parseBlock(b, "adapt", a, (*walker).adapt)
}

func (w *walker) adapt(k, v *yaml.Node, flow bool) Field[AdaptPatch] {
	out := block(w, "adapt", k, v, flow, adaptFields,
		func(v *yaml.Node) (AdaptPatch, bool) { // adapt: off, adapt: on
			on := v.Value == "on" && v.ShortTag() == "!!str"
			return AdaptPatch{Off: !on, On: on}, (on || v.Value == "off") && v.ShortTag() == "!!str"
		},
		func(a *AdaptPatch, key string, k, v *yaml.Node, flow bool) {
			switch key {
			case "adapt.per":
				a.Per = field(w, key, k, v, flow, text[AdaptPer](w))
			case "adapt.floor":
				a.Floor = field(w, key, k, v, flow, w.rate)
			case "adapt.latency":
				a.Latency = field(w, key, k, v, flow, w.duration)
			case "adapt.tolerance":
				a.Tolerance = field(w, key, k, v, flow, w.number)
			}
		})
	if a, ok := out.Get(); ok && a == (AdaptPatch{}) {
		out = Value(AdaptPatch{On: true}) // adapt: {}, as adapt: on
	}
	return out
}

// number is a decimal number.
func (w *walker) number(field string, v *yaml.Node, flow bool) float64 {
	var f float64
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" && v.ShortTag() != "!!float" || v.Decode(&f) != nil {
		w.fail(field, v, flow, "%s: want a number such as 1.5", kindName(v))
	}
	return f
}

// resolveAdapt returns the adapt block a describes, defaults filled in;
// nil for none.
func resolveAdapt(f Field[AdaptPatch]) *Adapt {
	a, ok := f.Get()
	if !ok || a.Off {
		return nil
	}
	return &Adapt{
		Per:       a.Per.or(DefaultAdaptPer),
		Floor:     a.Floor.or(Rate{}),
		Latency:   a.Latency.or(0),
		Tolerance: a.Tolerance.or(DefaultAdaptTolerance),
	}
}

// adaptPatch returns a as a Patch's block: every field set when whole,
// else those without a default left out when zero (patchOf).
func adaptPatch(a *Adapt, whole bool) Field[AdaptPatch] {
	switch {
	case a == nil && whole:
		return Value(AdaptPatch{Off: true})
	case a == nil:
		return Field[AdaptPatch]{}
	case whole:
		return Value(AdaptPatch{Per: Value(a.Per), Floor: Value(a.Floor), Latency: Value(a.Latency), Tolerance: Value(a.Tolerance), On: true})
	}
	return Value(AdaptPatch{Per: nonZero(a.Per), Floor: nonZero(a.Floor), Latency: nonZero(a.Latency), Tolerance: nonZero(a.Tolerance), On: true})
}

// adaptPaths appends the paths of the adapt fields p sets or resets.
func adaptPaths(out []string, f Field[AdaptPatch]) []string {
	a, ok := f.Get()
	if !ok || a.Off || a.On && a == (AdaptPatch{On: true}) {
		return path(out, "adapt", f)
	}
	out = path(out, "adapt.per", a.Per)
	out = path(out, "adapt.floor", a.Floor)
	out = path(out, "adapt.latency", a.Latency)
	return path(out, "adapt.tolerance", a.Tolerance)
}

// validate checks an adapt block of p.
func (a *Adapt) validate(p *Policy, add func(field, format string, args ...any)) {
	ceiling, under := p.Outflow, "outflow"
	switch a.Per {
	case AdaptPerKey:
	case AdaptPerPolicy:
		ceiling, under = p.Total, "total"
		if p.Total.IsZero() {
			add("adapt.per", "%q adapts the total cap: set total, or per %q", a.Per, AdaptPerKey)
		}
	default:
		add("adapt.per", "%q: want %q (each key's outflow adapts) or %q (the total adapts)%s", a.Per, AdaptPerKey, AdaptPerPolicy,
			suggest.Hint(string(a.Per), []string{string(AdaptPerKey), string(AdaptPerPolicy)}))
	}
	if !a.Floor.IsZero() {
		if err := a.Floor.check(); err != nil {
			add("adapt.floor", "rate %s: %v", a.Floor, err)
		} else if !ceiling.IsZero() && a.Floor.PerSecond() > ceiling.PerSecond() {
			add("adapt.floor", "%s is above %s %s, the ceiling it adapts under: lower adapt.floor to at most %s, or raise %s to at least %s",
				a.Floor, under, ceiling, ceiling, under, a.Floor)
		}
	}
	if a.Latency < 0 {
		add("adapt.latency", "%v: want a positive duration, or leave it out for the learned baseline", a.Latency)
	}
	if !(a.Tolerance > 1 && a.Tolerance <= 10) {
		add("adapt.tolerance", "%s: want a number above 1 and at most 10", strconv.FormatFloat(a.Tolerance, 'g', -1, 64))
	}
}

// diffAdapt adds the changes between the adapt blocks of a and b, a block
// added or dropped as AdaptText shows it.
func diffAdapt(a, b Policy, add func(field, from, to string)) {
	x, y := a.Adapt, b.Adapt
	switch {
	case x == nil && y == nil:
	case x == nil || y == nil:
		add("adapt", a.AdaptText(), b.AdaptText())
	default:
		add("adapt.per", string(x.Per), string(y.Per))
		add("adapt.floor", floorText(x.Floor), floorText(y.Floor))
		add("adapt.latency", latencyText(x.Latency), latencyText(y.Latency))
		add("adapt.tolerance", strconv.FormatFloat(x.Tolerance, 'g', -1, 64), strconv.FormatFloat(y.Tolerance, 'g', -1, 64))
	}
}

// AdaptText is p's adapt block in words, the one way the commands show it:
// what adapts, the floor (its default as the rate it comes to) and the
// latency target, "per key (default floor 2/s, latency target 1.5 ×
// learned baseline)"; "off" without a block.
func (p Policy) AdaptText() string {
	a := p.Adapt
	if a == nil {
		return "off"
	}
	floor := "floor " + a.Floor.String()
	if a.Floor.IsZero() {
		ceiling := p.Outflow
		if a.Per == AdaptPerPolicy {
			ceiling = p.Total
		}
		// Rounded, so that a tenth of 6/m reads 0.6/m.
		n, _ := strconv.ParseFloat(strconv.FormatFloat(ceiling.N*DefaultAdaptFloorShare, 'g', 12, 64), 64)
		floor = "default floor " + Rate{N: n, Per: ceiling.Per}.String()
	}
	target := "latency target " + strconv.FormatFloat(a.Tolerance, 'g', -1, 64) + " × learned baseline"
	if a.Latency != 0 {
		target = "latency target " + a.Latency.String()
		if a.Tolerance != DefaultAdaptTolerance {
			target += ", tolerance " + strconv.FormatFloat(a.Tolerance, 'g', -1, 64) + " unused"
		}
	}
	return fmt.Sprintf("per %s (%s, %s)", a.Per, floor, target)
}

// floorText is an adapt block's floor as the policy file writes it,
// "default" for none (a tenth of the ceiling).
func floorText(r Rate) string {
	if r.IsZero() {
		return "default"
	}
	return r.String()
}

// latencyText is an adapt block's latency target, "learned" for none.
func latencyText(d time.Duration) string {
	if d == 0 {
		return "learned"
	}
	return d.String()
}

type adaptJSON struct {
	Per       AdaptPer `json:"per"`
	Floor     Rate     `json:"floor,omitzero"`
	Latency   string   `json:"latency,omitempty"` // "200ms"; left out for the learned baseline
	Tolerance float64  `json:"tolerance"`
}

// MarshalJSON implements json.Marshaler: the latency as a duration string.
func (a Adapt) MarshalJSON() ([]byte, error) {
	v := adaptJSON{Per: a.Per, Floor: a.Floor, Tolerance: a.Tolerance}
	if a.Latency != 0 {
		v.Latency = a.Latency.String()
	}
	return json.Marshal(v)
}

// UnmarshalJSON implements json.Unmarshaler.
func (a *Adapt) UnmarshalJSON(b []byte) error {
	var v adaptJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	out := Adapt{Per: v.Per, Floor: v.Floor, Tolerance: v.Tolerance}
	if v.Latency != "" {
		d, err := time.ParseDuration(v.Latency)
		if err != nil {
			return fmt.Errorf("adapt.latency: %w", err)
		}
		out.Latency = d
	}
	*a = out
	return nil
}
