package drain

import (
	"testing"
	"time"
)

func TestNextSlot(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	interval := 50 * time.Millisecond
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	steps := []struct {
		name string
		s, a time.Time
		want time.Time
	}{
		{"on time", at(0), at(0), at(50)},
		{"a little late keeps the schedule", at(0), at(3), at(50)},
		{"late by almost an interval keeps the schedule", at(0), at(49), at(50)},
		{"late by more than an interval: the next slot of its grid", at(0), at(80), at(100)},
		{"late by several intervals: still its grid", at(0), at(170), at(200)},
		{"starting exactly on a grid slot takes that cell", at(0), at(100), at(150)},
	}
	for _, st := range steps {
		if got := nextSlot(st.s, st.a, interval); !got.Equal(st.want) {
			t.Errorf("%s: nextSlot(%v, %v) = %v, want %v", st.name, st.s.Sub(t0), st.a.Sub(t0), got.Sub(t0), st.want.Sub(t0))
		}
	}
}

func TestSlotHold(t *testing.T) {
	for _, c := range []struct{ interval, maxHold, want time.Duration }{
		{30 * time.Millisecond, time.Second, 30 * time.Millisecond}, // too short to free early
		{40 * time.Millisecond, time.Second, 30 * time.Millisecond}, // freed freeLead before the next slot
		{time.Second, time.Second, time.Second - freeLead},          // likewise
		{time.Minute, time.Second, time.Second},                     // the next slot is far: maxHold
		{1500 * time.Millisecond, time.Second, time.Second},         // likewise
	} {
		if got := slotHold(c.interval, c.maxHold); got != c.want {
			t.Errorf("slotHold(%v, %v) = %v, want %v", c.interval, c.maxHold, got, c.want)
		}
	}
}

// A delivered job frees its slot on its key's grid: freeLead before the
// next slot, however late the delivery started, when its slots are
// 4·freeLead or more apart.
func TestHoldEnd(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ms := time.Millisecond
	for _, c := range []struct {
		name           string
		started, next  time.Time
		hold, interval time.Duration
		want           time.Time
	}{
		{"on time", at(0), at(100), 90 * ms, 100 * ms, at(90)},
		{"late: still before the next slot", at(30), at(100), 90 * ms, 100 * ms, at(90)},
		{"late by almost the interval", at(95), at(100), 90 * ms, 100 * ms, at(90)},
		{"slots too close to free early", at(5), at(30), 30 * ms, 30 * ms, at(35)},
		{"a far next slot: the hold", at(30), at(60000), 1000 * ms, 60000 * ms, at(1030)},
		{"a far slot, late by nearly all of it", at(59500), at(60000), 1000 * ms, 60000 * ms, at(59990)},
	} {
		if got := holdEnd(c.started, c.next, c.hold, c.interval); !got.Equal(c.want) {
			t.Errorf("%s: holdEnd(%v, %v, %v, %v) = %v, want %v", c.name, c.started.Sub(t0), c.next.Sub(t0), c.hold, c.interval, got.Sub(t0), c.want.Sub(t0))
		}
	}
}

func TestBackoff(t *testing.T) {
	base, ceil := time.Second, 10*time.Second
	tests := []struct {
		n    int
		j    float64
		want time.Duration
	}{
		{1, 0, time.Second},
		{1, 0.99, time.Second},
		{2, 0, time.Second},
		{2, 0.5, 1500 * time.Millisecond},
		{3, 0.5, 2500 * time.Millisecond},
		{10, 0.5, 5500 * time.Millisecond},
		{100, 1, ceil},
	}
	for _, tt := range tests {
		if got := backoff(tt.n, base, ceil, tt.j); got != tt.want {
			t.Errorf("backoff(%d, 1s, 10s, %v) = %v, want %v", tt.n, tt.j, got, tt.want)
		}
	}
}

func TestRetryBounds(t *testing.T) {
	tests := []struct {
		retry             Retry
		base, wantCeiling time.Duration
	}{
		{Retry{}, DefaultRetryBackoff, DefaultRetryMaxBackoff},
		{Retry{Backoff: 100 * time.Millisecond, MaxBackoff: time.Second}, 100 * time.Millisecond, time.Second},
		{Retry{Backoff: 2 * time.Minute}, 2 * time.Minute, 2 * time.Minute},
		{Retry{Backoff: time.Second, MaxBackoff: time.Millisecond}, time.Second, DefaultRetryMaxBackoff},
	}
	for _, tt := range tests {
		if base, ceiling := tt.retry.bounds(); base != tt.base || ceiling != tt.wantCeiling {
			t.Errorf("%+v.bounds() = %v, %v; want %v, %v", tt.retry, base, ceiling, tt.base, tt.wantCeiling)
		}
	}
}
