package traffic_test

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper/traffic"
)

func collect(t *testing.T, s traffic.Synth) []traffic.Record {
	t.Helper()
	seq, err := s.Records()
	if err != nil {
		t.Fatalf("Records() of %+v: %v", s, err)
	}
	var out []traffic.Record
	for r := range seq {
		out = append(out, r)
	}
	return out
}

// within reports whether got is within tol (a fraction) of want.
func within(got, want, tol float64) bool { return math.Abs(got-want) <= tol*want }

func TestSynthPoisson(t *testing.T) {
	s := traffic.Synth{Duration: 100 * time.Second, Rate: 200, Keys: 10, Size: 64, Seed: 1}
	recs := collect(t, s)
	if n := float64(len(recs)); !within(n, 20_000, 0.03) {
		t.Errorf("%v at %v/s: %v records, want about 20,000", s.Duration, s.Rate, n)
	}
	perKey := map[string]int{}
	var gaps []time.Duration
	for i, r := range recs {
		perKey[r.Key]++
		if r.Size != 64 || r.At%time.Microsecond != 0 || r.At < 0 || r.At >= s.Duration {
			t.Fatalf("record %d = %+v: want size 64, whole microseconds within the duration", i, r)
		}
		if i > 0 {
			if r.At < recs[i-1].At {
				t.Fatalf("record %d at %v before record %d at %v", i, r.At, i-1, recs[i-1].At)
			}
			gaps = append(gaps, r.At-recs[i-1].At)
		}
	}
	if len(perKey) != 10 {
		t.Errorf("%d keys used, want 10", len(perKey))
	}
	for k, n := range perKey {
		if !within(float64(n), 2000, 0.1) {
			t.Errorf("key %s: %d records, want about 2,000 (uniform)", k, n)
		}
	}
	// Exponential gaps: the median is ln 2 / rate.
	slices.Sort(gaps)
	if med := gaps[len(gaps)/2].Seconds(); !within(med, math.Ln2/200, 0.05) {
		t.Errorf("median gap %.5fs, want about %.5fs (Poisson)", med, math.Ln2/200)
	}
	if again := collect(t, s); !slices.Equal(again, recs) {
		t.Errorf("the same Synth made another trace")
	}
	s.Seed = 2
	if other := collect(t, s); slices.Equal(other, recs) {
		t.Errorf("another seed made the same trace")
	}
}

func TestSynthEvenBursts(t *testing.T) {
	s := traffic.Synth{
		Duration: 30 * time.Second, Rate: 10, Even: true, Keys: 1, KeyPrefix: "tenant-",
		Burst: traffic.Burst{Every: 10 * time.Second, For: 2 * time.Second, Rate: 100},
	}
	recs := collect(t, s)
	perSecond := make([]int, 30)
	for _, r := range recs {
		perSecond[int(r.At/time.Second)]++
		if r.Key != "tenant-0" {
			t.Fatalf("key %q, want tenant-0", r.Key)
		}
	}
	for sec, n := range perSecond {
		want := 10
		if sec%10 < 2 {
			want = 100
		}
		if n < want-1 || n > want+1 {
			t.Errorf("second %d: %d records, want %d±1", sec, n, want)
		}
	}
}

func TestSynthZipfDiurnal(t *testing.T) {
	s := traffic.Synth{
		Duration: 200 * time.Second, Rate: 100, Keys: 1000, Zipf: 1.2, Seed: 3,
		Diurnal: traffic.Diurnal{Period: 200 * time.Second, Amplitude: 0.8},
	}
	recs := collect(t, s)
	perKey := map[string]int{}
	var firstQuarter, middle int
	for _, r := range recs {
		perKey[r.Key]++
		switch {
		case r.At < 50*time.Second:
			firstQuarter++
		case r.At >= 75*time.Second && r.At < 125*time.Second:
			middle++
		}
	}
	if top, share := perKey["k0"], float64(perKey["k0"])/float64(len(recs)); share < 0.1 {
		t.Errorf("heaviest key k0 got %d of %d records (%.1f%%): not heavy-tailed", top, len(recs), 100*share)
	}
	if perKey["k999"] > perKey["k0"]/50 {
		t.Errorf("k999 got %d records, k0 %d: want the tail far lighter", perKey["k999"], perKey["k0"])
	}
	// The ramp: the middle of the period runs at up to 1.8× the rate, the
	// first quarter at about a third of it.
	if middle < 3*firstQuarter {
		t.Errorf("middle 50 s: %d records, first 50 s: %d; want the ramp's peak in the middle", middle, firstQuarter)
	}
}

func TestSynthValidate(t *testing.T) {
	ok := traffic.Synth{Duration: time.Second, Rate: 1, Keys: 1}
	for _, tc := range []struct {
		name string
		edit func(*traffic.Synth)
		want string
	}{
		{"no duration", func(s *traffic.Synth) { s.Duration = 0 }, "duration"},
		{"negative rate", func(s *traffic.Synth) { s.Rate = -1 }, "rate -1"},
		{"no keys", func(s *traffic.Synth) { s.Keys = 0 }, "keys 0"},
		{"zipf 1", func(s *traffic.Synth) { s.Zipf = 1 }, "zipf 1"},
		{"burst longer than its period", func(s *traffic.Synth) { s.Burst = traffic.Burst{Every: time.Second, For: 2 * time.Second, Rate: 5} }, "burst for 2s every 1s"},
		{"amplitude 2", func(s *traffic.Synth) { s.Diurnal = traffic.Diurnal{Period: time.Hour, Amplitude: 2} }, "amplitude 2"},
		{"nothing", func(s *traffic.Synth) { s.Rate = 0 }, "empty"},
		{"negative size", func(s *traffic.Synth) { s.Size = -1 }, "size -1"},
	} {
		s := ok
		tc.edit(&s)
		if _, err := s.Records(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Records() error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
	if _, err := ok.Records(); err != nil {
		t.Errorf("Records() of %+v: %v", ok, err)
	}
}
