package adapt

import (
	"encoding/json"
	"fmt"
	"time"
)

// Kind is what last set a Controller's rate.
type Kind uint8

// Kinds of Reason.
const (
	AtCeiling    Kind = iota // at the ceiling: nothing held it back
	Probing                  // clear windows: the rate rises to find the capacity
	Recovering               // clear windows: back toward the capacity last estimated
	Unused                   // the rate was not used (too few jobs): held
	Latency                  // latency above the target: set under the capacity estimated
	Timeouts                 // deliveries timed out: backed off
	Throttled429             // the downstream asked for a pause (429/503): backed off
	Failures                 // deliveries failed: backed off
)

var kindNames = [...]string{"at_ceiling", "probing", "recovering", "unused", "latency", "timeouts", "throttled", "failures"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Reason says why a Controller's rate is what it is, with the figures
// that decided it.
type Reason struct {
	Kind     Kind
	Ratio    float64       // Latency: the window's mean latency over the baseline
	Target   time.Duration // Latency: the latency target
	Count    int           // Timeouts, Throttled429, Failures: how many
	Of       int           // of how many deliveries
	Window   time.Duration // in how long
	Capacity float64       // Recovering: the capacity returned to, per second
	// Hold, for Timeouts, Throttled429 and Failures of a window in which
	// nothing was answered in time: the rate was not cut again but held,
	// and is cut after this many more such windows (0: it was cut).
	Hold int
	text string // the text a Reason read from JSON says
}

// String says the reason in a few words: "latency 2.1× baseline",
// "3 timeouts of 40 in 1s".
func (r Reason) String() string {
	if r.text != "" {
		return r.text
	}
	s := r.words()
	if r.Hold > 0 {
		s += fmt.Sprintf(": held while the downstream works off what it queued, cut again after %d more such window%s", r.Hold, plural(r.Hold))
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func (r Reason) words() string {
	switch r.Kind {
	case Latency:
		return fmt.Sprintf("latency %.1f× baseline (target %v)", r.Ratio, r.Target.Round(time.Millisecond))
	case Timeouts:
		return fmt.Sprintf("%d timeouts of %d in %v", r.Count, r.Of, r.Window)
	case Throttled429:
		return fmt.Sprintf("%d pauses asked (429/503) of %d in %v", r.Count, r.Of, r.Window)
	case Failures:
		return fmt.Sprintf("%d failures of %d in %v", r.Count, r.Of, r.Window)
	case Recovering:
		return fmt.Sprintf("recovering toward %.1f/s", r.Capacity)
	case Unused:
		return "rate not used: held"
	case Probing:
		return "no congestion: probing up"
	}
	return "at ceiling"
}

// MarshalJSON writes the reason as {"kind": ..., "text": ...}.
func (r Reason) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Kind Kind   `json:"kind"`
		Text string `json:"text"`
	}{r.Kind, r.String()})
}

// UnmarshalJSON implements json.Unmarshaler: a Reason read back keeps its
// kind and its text, not the figures.
func (r *Reason) UnmarshalJSON(b []byte) error {
	var v struct {
		Kind string `json:"kind"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*r = Reason{text: v.Text}
	for k, name := range kindNames {
		if name == v.Kind {
			r.Kind = Kind(k)
		}
	}
	return nil
}
