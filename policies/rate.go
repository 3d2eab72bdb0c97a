package policies

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/internal/suggest"
)

// Rate is N events per Per. The zero Rate means "no rate" where a field is
// optional. A Rate is a plain value, safe to copy and to share.
type Rate struct {
	N   float64       // events, > 0
	Per time.Duration // period, > 0
}

// ParseRate parses "N/s", "N/m", "N/h", "N/d" or "N/<duration>" (for example
// "20/s", "0.5/s", "5/10s", "600/1m30s"). N is a positive decimal number;
// the duration uses time.ParseDuration's units (ns, us, ms, s, m, h). The
// interval between two events, Per/N, must lie between 1µs and 8760h: from
// 1000000/s down to once a year. Surrounding spaces are ignored.
func ParseRate(s string) (Rate, error) {
	num, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		hint := ""
		if n, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil && n > 0 {
			hint = fmt.Sprintf(" (did you mean %q?)", strings.TrimSpace(s)+"/s")
		}
		return Rate{}, fmt.Errorf("rate %q: want N/s, N/m, N/h, N/d or N/<duration>%s", s, hint)
	}
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(n) || math.IsInf(n, 0) || n <= 0 || strings.ContainsAny(num, "xXpP_") {
		return Rate{}, fmt.Errorf("rate %q: %q is not a positive number", s, num)
	}
	per = strings.TrimSpace(per)
	var d time.Duration
	switch per {
	case "s":
		d = time.Second
	case "m":
		d = time.Minute
	case "h":
		d = time.Hour
	case "d":
		d = 24 * time.Hour
	default:
		d, err = time.ParseDuration(per)
		if err != nil {
			hint := ""
			if unit, ok := suggest.Per(per); ok {
				hint = fmt.Sprintf(" (did you mean %q?)", strings.TrimSpace(num)+"/"+unit)
			}
			return Rate{}, fmt.Errorf("rate %q: %q is not s, m, h, d or a duration%s", s, per, hint)
		}
		if d <= 0 {
			return Rate{}, fmt.Errorf("rate %q: period must be positive", s)
		}
	}
	r := Rate{N: n, Per: d}
	if err := r.check(); err != nil {
		return Rate{}, fmt.Errorf("rate %q: %w", s, err)
	}
	return r, nil
}

// Bounds on the interval between two events of a usable Rate.
const (
	minInterval = time.Microsecond     // 1000000/s
	maxInterval = 365 * 24 * time.Hour // 1/8760h
)

// check reports why r, however it was built, is not a rate ParseRate would
// return, or nil when it is one.
func (r Rate) check() error {
	switch {
	case math.IsNaN(r.N) || math.IsInf(r.N, 0) || r.N <= 0:
		return errors.New("the count N must be a positive number")
	case r.Per <= 0:
		return errors.New("period must be positive")
	}
	if iv := r.exactInterval(); iv < float64(minInterval) || iv > float64(maxInterval) {
		return errors.New("must be between 1/8760h (once a year) and 1000000/s")
	}
	return nil
}

func (r Rate) exactInterval() float64 { return float64(r.Per) / r.N }

// IsZero reports whether r is the zero Rate.
func (r Rate) IsZero() bool { return r.N == 0 || r.Per == 0 }

// Interval is the time between two events at rate r: Per/N. It is 0 for the zero Rate.
func (r Rate) Interval() time.Duration {
	if r.IsZero() {
		return 0
	}
	return time.Duration(math.Round(r.exactInterval()))
}

// PerSecond is r expressed in events per second.
func (r Rate) PerSecond() float64 {
	if r.IsZero() {
		return 0
	}
	return r.N / r.Per.Seconds()
}

// String formats r in the syntax ParseRate accepts.
func (r Rate) String() string {
	if r.IsZero() {
		return ""
	}
	n := strconv.FormatFloat(r.N, 'f', -1, 64)
	switch r.Per {
	case time.Second:
		return n + "/s"
	case time.Minute:
		return n + "/m"
	case time.Hour:
		return n + "/h"
	case 24 * time.Hour:
		return n + "/d"
	}
	return n + "/" + r.Per.String()
}

// MarshalText implements encoding.TextMarshaler.
func (r Rate) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler. It accepts what
// ParseRate accepts, and the empty text (what MarshalText makes of the zero
// Rate) as the zero Rate.
func (r *Rate) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*r = Rate{}
		return nil
	}
	v, err := ParseRate(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}
