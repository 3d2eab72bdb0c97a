package policies

import (
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	tests := []struct {
		in       string
		want     Rate
		interval time.Duration
		str      string
	}{
		{"20/s", Rate{20, time.Second}, 50 * time.Millisecond, "20/s"},
		{"0.5/s", Rate{0.5, time.Second}, 2 * time.Second, "0.5/s"},
		{"5/10s", Rate{5, 10 * time.Second}, 2 * time.Second, "5/10s"},
		{"600/m", Rate{600, time.Minute}, 100 * time.Millisecond, "600/m"},
		{"1/d", Rate{1, 24 * time.Hour}, 24 * time.Hour, "1/d"},
		{"3/2s", Rate{3, 2 * time.Second}, 666666667 * time.Nanosecond, "3/2s"},
		{"10/h", Rate{10, time.Hour}, 6 * time.Minute, "10/h"},
		{"600/1m30s", Rate{600, 90 * time.Second}, 150 * time.Millisecond, "600/1m30s"},
		{"1/1m", Rate{1, time.Minute}, time.Minute, "1/m"},
		{" 1e3 / s ", Rate{1000, time.Second}, time.Millisecond, "1000/s"},
		{"1000000/s", Rate{1e6, time.Second}, time.Microsecond, "1000000/s"},
		{"1/8760h", Rate{1, 8760 * time.Hour}, 8760 * time.Hour, "1/8760h0m0s"},
	}
	for _, tt := range tests {
		got, err := ParseRate(tt.in)
		if err != nil {
			t.Errorf("ParseRate(%q) error: %v", tt.in, err)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseRate(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
		if iv := got.Interval(); iv != tt.interval {
			t.Errorf("ParseRate(%q).Interval() = %v, want %v", tt.in, iv, tt.interval)
		}
		if s := got.String(); s != tt.str {
			t.Errorf("ParseRate(%q).String() = %q, want %q", tt.in, s, tt.str)
		}
		if back, err := ParseRate(got.String()); err != nil || back != got {
			t.Errorf("ParseRate(%q) = %v, %v, want %v (round trip)", got.String(), back, err, got)
		}
	}
}

func TestParseRateErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string // part of the error message
	}{
		{"fast", `rate "fast": want N/s, N/m, N/h, N/d or N/<duration>`},
		{"", "want N/s"},
		{"20", "want N/s"},
		{"0/s", `"0" is not a positive number`},
		{"-1/s", `"-1" is not a positive number`},
		{"1/0s", "period must be positive"},
		{"1/-1s", "period must be positive"},
		{"NaN/s", `"NaN" is not a positive number`},
		{"Inf/s", `"Inf" is not a positive number`},
		{"1/", `"" is not s, m, h, d or a duration`},
		{"/s", `"" is not a positive number`},
		{"1e400/s", `"1e400" is not a positive number`},
		{"0x10/s", "is not a positive number"},
		{"1/S", `"S" is not s, m, h, d or a duration (did you mean "1/s"?)`},
		{"20/ M", `(did you mean "20/m"?)`},
		{"1/2d", `"2d" is not s, m, h, d or a duration`},
		{"1/s/s", "is not s, m, h, d or a duration"},
		{"2000000/s", "must be between 1/8760h (once a year) and 1000000/s"},
		{"1/9000h", "must be between"},
		{"1/1ns", "must be between"},
	}
	for _, tt := range tests {
		got, err := ParseRate(tt.in)
		if err == nil {
			t.Errorf("ParseRate(%q) = %v, want error containing %q", tt.in, got, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseRate(%q) error = %q, want it to contain %q", tt.in, err, tt.want)
		}
	}
}

func TestRateZero(t *testing.T) {
	var r Rate
	if !r.IsZero() || r.Interval() != 0 || r.PerSecond() != 0 || r.String() != "" {
		t.Errorf("zero Rate: IsZero %v, Interval %v, PerSecond %v, String %q; want true, 0, 0, \"\"",
			r.IsZero(), r.Interval(), r.PerSecond(), r.String())
	}
}

func TestRateText(t *testing.T) {
	for _, in := range []string{"20/s", "5/10s", ""} {
		var r Rate
		if err := r.UnmarshalText([]byte(in)); err != nil {
			t.Errorf("UnmarshalText(%q) error: %v", in, err)
			continue
		}
		got, _ := r.MarshalText()
		if string(got) != in {
			t.Errorf("MarshalText(UnmarshalText(%q)) = %q, want %q", in, got, in)
		}
	}
	var r Rate
	if err := r.UnmarshalText([]byte("fast")); err == nil {
		t.Errorf("UnmarshalText(%q) = %v, want error", "fast", r)
	}
}

func TestPerSecond(t *testing.T) {
	r, _ := ParseRate("600/m")
	if got := r.PerSecond(); got != 10 {
		t.Errorf("ParseRate(600/m).PerSecond() = %v, want 10", got)
	}
}
