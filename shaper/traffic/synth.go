package traffic

import (
	"errors"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// Synth describes made-up traffic for one policy. Duration, Rate (or a
// burst's) and Keys say how much; the rest shapes it. The zero values of
// Even, Zipf, Burst and Diurnal mean Poisson arrivals at a steady rate over
// keys chosen uniformly.
type Synth struct {
	// Duration is how long the trace lasts.
	Duration time.Duration
	// Rate is the mean number of submissions per second outside bursts
	// (over all keys).
	Rate float64
	// Even spaces arrivals evenly, 1/rate apart, instead of at random
	// (Poisson).
	Even bool
	// Keys is how many keys there are, named KeyPrefix0 … KeyPrefix<Keys-1>.
	Keys int
	// KeyPrefix is the start of every key's name. Default "k".
	KeyPrefix string
	// Zipf, above 1, makes keys heavy-tailed: key i is chosen with
	// probability proportional to 1/(i+1)^Zipf, so a few keys get most of
	// the traffic. 0 chooses keys uniformly.
	Zipf float64
	// Burst, with Every set, raises the rate to Burst.Rate for Burst.For at
	// the start of every Burst.Every (at 0, Every, 2·Every, …).
	Burst Burst
	// Diurnal, with Period set, makes the rate a ramp that repeats every
	// Period: Rate·(1 − Amplitude·cos(2πt/Period)), lowest at the start and
	// highest half a period in.
	Diurnal Diurnal
	// Size is every payload's size in bytes.
	Size int
	// Seed makes the trace: the same Synth gives the same trace.
	Seed uint64
}

// Burst is a rate that comes back at a fixed period.
type Burst struct {
	Every time.Duration
	For   time.Duration
	Rate  float64 // submissions per second during a burst
}

// Diurnal is a rate that rises and falls over a period.
type Diurnal struct {
	Period    time.Duration
	Amplitude float64 // 0 to 1
}

// SynthError is what is wrong with one field of a Synth: Field names it
// as Validate's message does ("duration", "burst.rate"), for a caller to
// say which of its own settings gave it.
type SynthError struct {
	Field string
	Msg   string // what is wrong, without the field's name
}

func (e *SynthError) Error() string { return e.Field + " " + e.Msg }

// Validate says what is wrong with s, if anything: every wrong field, as a
// *SynthError each, joined.
func (s Synth) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, &SynthError{Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	if s.Duration <= 0 {
		bad("duration", "%v: want a positive duration", s.Duration)
	}
	if s.Rate < 0 || math.IsNaN(s.Rate) || math.IsInf(s.Rate, 0) {
		bad("rate", "%v: want a number of submissions per second ≥ 0", s.Rate)
	}
	if s.Keys < 1 {
		bad("keys", "%d: want at least 1", s.Keys)
	}
	if s.Zipf != 0 && !(s.Zipf > 1) {
		bad("zipf", "%v: want an exponent above 1 (or 0 for uniform keys)", s.Zipf)
	}
	if s.Size < 0 {
		bad("size", "%d: want a number of bytes ≥ 0", s.Size)
	}
	if b := s.Burst; b.Every != 0 || b.For != 0 || b.Rate != 0 {
		if b.Every <= 0 || b.For <= 0 || b.For > b.Every {
			bad("burst", "for %v every %v: want 0 < for ≤ every", b.For, b.Every)
		}
		if b.Rate < 0 || math.IsNaN(b.Rate) || math.IsInf(b.Rate, 0) {
			bad("burst.rate", "%v: want a number of submissions per second ≥ 0", b.Rate)
		}
	}
	if d := s.Diurnal; d.Period != 0 || d.Amplitude != 0 {
		if d.Period <= 0 {
			bad("diurnal.period", "%v: want a positive period", d.Period)
		}
		if !(d.Amplitude >= 0 && d.Amplitude <= 1) {
			bad("diurnal.amplitude", "%v: want an amplitude from 0 to 1", d.Amplitude)
		}
	}
	if s.Rate == 0 && s.Burst.Rate == 0 && len(errs) == 0 {
		bad("rate", "0 and no burst: the trace would be empty")
	}
	if len(errs) > 0 {
		return fmt.Errorf("traffic: synth: %w", errors.Join(errs...))
	}
	return nil
}

// Records returns the trace s describes, made as it is read: memory does
// not grow with its length. Times are whole microseconds, as in a file.
func (s Synth) Records() (iter.Seq[Record], error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.KeyPrefix == "" {
		s.KeyPrefix = "k"
	}
	return func(yield func(Record) bool) {
		rng := rand.New(rand.NewPCG(s.Seed, 0x5ca1ab1e))
		names := make([]string, s.Keys) // made as keys first appear
		var zipf *rand.Zipf
		if s.Zipf > 1 {
			zipf = rand.NewZipf(rng, s.Zipf, 1, uint64(s.Keys-1))
		}
		key := func() string {
			var i int
			if zipf != nil {
				i = int(zipf.Uint64())
			} else {
				i = rng.IntN(s.Keys)
			}
			if names[i] == "" {
				names[i] = s.KeyPrefix + strconv.Itoa(i)
			}
			return names[i]
		}
		end := s.Duration.Seconds()
		for t := 0.0; t < end; {
			base, segEnd := s.segment(t)
			segEnd = min(segEnd, end)
			peak := base * (1 + s.Diurnal.Amplitude)
			if peak <= 0 {
				t = segEnd
				continue
			}
			if s.Even {
				// The next arrival one gap at the rate of now away; a
				// rate of nearly 0 (the ramp's low) waits a thousand
				// peak gaps at most.
				next := t + 1/max(s.rateAt(t, base), peak/1000)
				if next >= segEnd {
					t = segEnd
					continue
				}
				t = next
			} else {
				// Poisson by thinning: candidates at the segment's peak
				// rate, each kept with probability rate(t)/peak. Past the
				// segment's end, start again from there (arrivals are
				// memoryless).
				next := t + rng.ExpFloat64()/peak
				if next >= segEnd {
					t = segEnd
					continue
				}
				t = next
				if rng.Float64()*peak > s.rateAt(t, base) {
					continue
				}
			}
			if t >= end {
				return
			}
			at := time.Duration(t*1e6) * time.Microsecond
			if !yield(Record{At: at, Key: key(), Size: s.Size}) {
				return
			}
		}
	}, nil
}

// segment returns the rate without the diurnal factor at t (seconds) and
// when it next changes.
func (s Synth) segment(t float64) (rate, until float64) {
	b := s.Burst
	if b.Every <= 0 {
		return s.Rate, math.Inf(1)
	}
	every, length := b.Every.Seconds(), b.For.Seconds()
	start := math.Floor(t/every) * every
	if t < start+length {
		return b.Rate, start + length
	}
	return s.Rate, start + every
}

// rateAt is the rate at t (seconds) of a segment whose rate is base.
func (s Synth) rateAt(t, base float64) float64 {
	d := s.Diurnal
	if d.Period <= 0 {
		return base
	}
	return base * (1 - d.Amplitude*math.Cos(2*math.Pi*t/d.Period.Seconds()))
}
