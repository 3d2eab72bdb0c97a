package main

import (
	"fmt"
	"math"
	"testing"
	"time"
)

func TestKeyStatsWindowAndRate(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	steps := []struct {
		name          string
		ms            int
		id            string
		wantWindow    int // deliveries in the closed 1 s window ending now
		wantWindowMax int
	}{
		{"first", 0, "a", 1, 1},
		{"half a second later", 500, "b", 2, 2},
		{"exactly one second after the first", 1000, "c", 3, 3},
		{"first and second fall out", 1600, "d", 2, 3},
		{"burst 1", 1700, "e", 3, 3},
		{"burst 2", 1800, "f", 4, 4},
		{"duplicate of f", 1900, "f", 5, 5},
		{"long pause", 5000, "g", 1, 5},
	}
	var k keyStats
	for _, s := range steps {
		k.add(s.id, at(s.ms), time.Time{})
		if got := len(k.window) - k.head; got != s.wantWindow {
			t.Errorf("%s: window holds %d, want %d", s.name, got, s.wantWindow)
		}
		if k.windowMax != s.wantWindowMax {
			t.Errorf("%s: windowMax = %d, want %d", s.name, k.windowMax, s.wantWindowMax)
		}
	}
	if got, want := k.deliveries, len(steps); got != want {
		t.Errorf("deliveries = %d, want %d", got, want)
	}
	if got, want := k.distinct(), 7; got != want {
		t.Errorf("distinct = %d, want %d", got, want)
	}
	if got, want := k.duplicates, 1; got != want {
		t.Errorf("duplicates = %d, want %d", got, want)
	}
	if got, want := k.rate(), 7/5.0; math.Abs(got-want) > 1e-9 {
		t.Errorf("rate = %v, want %v", got, want)
	}
	s := k.summary("k")
	if s.GapMinMs != 100 || s.GapP50Ms != 500 || s.GapP99Ms != 3100 {
		t.Errorf("gaps min/p50/p99 = %v/%v/%v ms, want 100/500/3100", s.GapMinMs, s.GapP50Ms, s.GapP99Ms)
	}
}

func TestKeyStatsSteadyRate(t *testing.T) {
	// 20/s for 10 s: the achieved rate is exact and no closed 1 s window
	// holds more than 20+1 deliveries.
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var k keyStats
	for i := range 201 {
		at := t0.Add(time.Duration(i) * 50 * time.Millisecond)
		k.add(string(rune('A'+i%26))+string(rune('0'+i/26)), at, at.Add(-time.Duration(i%10)*time.Millisecond))
	}
	if got := k.rate(); math.Abs(got-20) > 1e-9 {
		t.Errorf("rate = %v, want 20", got)
	}
	if k.windowMax != 21 {
		t.Errorf("windowMax = %d, want 21", k.windowMax)
	}
	s := k.summary("k")
	if s.GapMinMs != 50 || s.GapP99Ms != 50 {
		t.Errorf("gap min/p99 = %v/%v ms, want 50/50", s.GapMinMs, s.GapP99Ms)
	}
	if s.LatencyP50Ms != 4 || s.LatencyP99Ms != 9 {
		t.Errorf("latency p50/p99 = %v/%v ms, want 4/9", s.LatencyP50Ms, s.LatencyP99Ms)
	}
	if s.Duplicates != 0 || s.Distinct != 201 {
		t.Errorf("distinct/duplicates = %d/%d, want 201/0", s.Distinct, s.Duplicates)
	}
}

func TestKeyStatsFewDeliveries(t *testing.T) {
	var k keyStats
	if s := k.summary("empty"); s != (keySummary{Key: "empty"}) {
		t.Errorf("summary of nothing = %+v, want zero", s)
	}
	now := time.Now()
	k.add("", now, time.Time{})
	k.add("", now, time.Time{})
	if got := k.rate(); got != 0 {
		t.Errorf("rate of two simultaneous deliveries = %v, want 0", got)
	}
	if k.deliveries != 2 || k.distinct() != 0 || k.duplicates != 0 {
		t.Errorf("deliveries/distinct/duplicates = %d/%d/%d, want 2/0/0 for deliveries without id",
			k.deliveries, k.distinct(), k.duplicates)
	}
}

func TestPercentile(t *testing.T) {
	var hundred []time.Duration
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, time.Duration(i)*time.Millisecond)
	}
	tests := []struct {
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{[]time.Duration{7}, 0.5, 7},
		{[]time.Duration{7}, 0.99, 7},
		{hundred, 0.5, 50 * time.Millisecond},
		{hundred, 0.9, 90 * time.Millisecond},
		{hundred, 0.99, 99 * time.Millisecond},
		{hundred, 1, 100 * time.Millisecond},
		{hundred, 0, time.Millisecond},
	}
	for _, tt := range tests {
		if got := percentile(tt.in, tt.p); got != tt.want {
			t.Errorf("percentile(%d values, %v) = %v, want %v", len(tt.in), tt.p, got, tt.want)
		}
	}
}

// Two bursts two minutes apart: the key was delivered at 20/s while it was
// busy, and rate/s says so; the rate over the whole span does not.
func TestBusyRate(t *testing.T) {
	var k keyStats
	t0 := time.Unix(0, 0)
	for burst := range 2 {
		start := t0.Add(time.Duration(burst) * 2 * time.Minute)
		for i := range 40 {
			k.add(fmt.Sprint(burst, i), start.Add(time.Duration(i)*50*time.Millisecond), time.Time{})
		}
	}
	s := k.summary("k0")
	if math.Abs(s.BusyRatePerSec-20) > 0.01 || s.IdleGaps != 1 {
		t.Errorf("busy rate %.3f/s over %d idle gaps, want 20/s and 1", s.BusyRatePerSec, s.IdleGaps)
	}
	if s.RatePerSec > 1 {
		t.Errorf("rate over the span %.3f/s, want under 1/s", s.RatePerSec)
	}
	// A steady slow key (6/m) has no idle gap: its busy rate is its rate.
	var slow keyStats
	for i := range 5 {
		slow.add(fmt.Sprint(i), t0.Add(time.Duration(i)*10*time.Second), time.Time{})
	}
	if s := slow.summary("slow"); s.IdleGaps != 0 || s.BusyRatePerSec != s.RatePerSec {
		t.Errorf("6/m: busy rate %.4f, rate %.4f, %d idle gaps; want the same rate and none", s.BusyRatePerSec, s.RatePerSec, s.IdleGaps)
	}
}
