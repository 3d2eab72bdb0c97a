package limiter

import (
	"math/bits"
	"time"
)

// windowStart returns the start of the Period-long window holding now.
// Windows are aligned to multiples of Period since the Unix epoch, as in
// the Redis scripts, so every process agrees on them.
func windowStart(now time.Time, period time.Duration) time.Time {
	ns := now.UnixNano()
	m := ns % int64(period)
	if m < 0 {
		m += int64(period)
	}
	return time.Unix(0, ns-m)
}

// FixedWindowState is what the fixed window counter keeps per key: the
// window it counts and how many events it admitted in it.
//
// The zero value is a key with no history. A FixedWindowState is not safe
// for concurrent use.
type FixedWindowState struct {
	// Start is the start of the counted window.
	Start time.Time
	// Count is the number of events admitted in the window.
	Count int64
}

// Allow decides for one event at now under l, and counts it in s when it is
// admitted. It reads no clock.
func (s *FixedWindowState) Allow(l Limit, now time.Time) Result {
	if now.Before(s.Start) {
		now = s.Start // the clock stepped back: stay in the counted window
	}
	ws := windowStart(now, l.Period)
	if !s.Start.Equal(ws) {
		s.Start, s.Count = ws, 0
	}
	reset := ws.Add(l.Period).Sub(now)
	if s.Count >= l.Count {
		return Result{Limit: l.Count, RetryAfter: reset, Reset: reset}
	}
	s.Count++
	return Result{Allowed: true, Limit: l.Count, Remaining: l.Count - s.Count, Reset: reset}
}

// SlidingLogState is what the sliding window log keeps per key: the times
// of the events it admitted during the last Period, oldest first. An event
// is admitted when fewer than Count events lie in (now-Period, now].
// Rejected events are not logged, so a key never holds more than Count
// entries.
//
// The zero value is a key with no history. A SlidingLogState is not safe
// for concurrent use.
type SlidingLogState struct {
	// Times holds the admission times, oldest first.
	Times []time.Time
}

// Allow decides for one event at now under l, and logs it in s when it is
// admitted. It reads no clock.
func (s *SlidingLogState) Allow(l Limit, now time.Time) Result {
	if n := len(s.Times); n > 0 && now.Before(s.Times[n-1]) {
		now = s.Times[n-1] // the clock stepped back: keep the log in order
	}
	cutoff := now.Add(-l.Period)
	i := 0
	for i < len(s.Times) && !s.Times[i].After(cutoff) {
		i++
	}
	if i > 0 {
		n := copy(s.Times, s.Times[i:])
		clear(s.Times[n:])
		s.Times = s.Times[:n]
	}
	if int64(len(s.Times)) >= l.Count {
		return Result{
			Limit:      l.Count,
			RetryAfter: s.Times[0].Add(l.Period).Sub(now),
			Reset:      s.Times[len(s.Times)-1].Add(l.Period).Sub(now),
		}
	}
	s.Times = append(s.Times, now)
	return Result{Allowed: true, Limit: l.Count, Remaining: l.Count - int64(len(s.Times)), Reset: l.Period}
}

// SlidingWindowState is what the sliding window counter keeps per key: the
// events admitted in the current aligned window and in the one before. It
// estimates the events of the last Period as Prev weighted by the share of
// the previous window still inside it, plus Curr, and admits an event when
// the estimate is below Count.
//
// The zero value is a key with no history. A SlidingWindowState is not safe
// for concurrent use.
type SlidingWindowState struct {
	// Start is the start of the current window.
	Start time.Time
	// Prev is the number of events admitted in the window before Start.
	Prev int64
	// Curr is the number of events admitted in the window from Start.
	Curr int64
}

// rolled returns s moved to the window holding now, and how far into that
// window now is.
func (s SlidingWindowState) rolled(l Limit, now time.Time) (SlidingWindowState, time.Duration) {
	if now.Before(s.Start) {
		now = s.Start // the clock stepped back: stay in the counted window
	}
	ws := windowStart(now, l.Period)
	switch {
	case s.Start.Equal(ws):
	case s.Start.Equal(ws.Add(-l.Period)):
		s = SlidingWindowState{Start: ws, Prev: s.Curr}
	default:
		s = SlidingWindowState{Start: ws}
	}
	return s, now.Sub(ws)
}

// Estimate returns the estimated number of events in the Period before now:
// Prev·(Period−elapsed)/Period + Curr, elapsed being how far now is into the
// current window. It does not change s.
func (s SlidingWindowState) Estimate(l Limit, now time.Time) float64 {
	r, elapsed := s.rolled(l, now)
	return float64(r.Prev)*float64(l.Period-elapsed)/float64(l.Period) + float64(r.Curr)
}

// Allow decides for one event at now under l, and counts it in s when it is
// admitted. It reads no clock. The comparison is done in exact integer
// arithmetic: admitted iff Prev·(Period−elapsed) + Curr·Period < Count·Period.
func (s *SlidingWindowState) Allow(l Limit, now time.Time) Result {
	r, e := s.rolled(l, now)
	*s = r
	p := uint64(l.Period)
	prevPart := mul(uint64(r.Prev), p-uint64(e)) // Prev·(P−e)
	est := add(prevPart, mul(uint64(r.Curr), p))
	limit := mul(uint64(l.Count), p)
	if est.less(limit) {
		s.Curr++
		// Remaining = ⌈(Count·P − Prev·(P−e) − Curr·P)/P⌉ = Count − Curr − ⌊Prev·(P−e)/P⌋.
		q, _ := bits.Div64(prevPart.hi, prevPart.lo, p)
		remaining := max(l.Count-s.Curr-int64(q), 0)
		return Result{Allowed: true, Limit: l.Count, Remaining: remaining, Reset: 2*l.Period - e}
	}
	res := Result{Limit: l.Count, Reset: l.Period - e}
	if r.Curr > 0 {
		res.Reset = 2*l.Period - e
	}
	if r.Curr < l.Count && r.Prev > 0 {
		// Within this window the estimate drops below Count once
		// elapsed > P·(Prev−Count+Curr)/Prev.
		x := mul(p, uint64(r.Prev-l.Count+r.Curr))
		q, _ := bits.Div64(x.hi, x.lo, uint64(r.Prev))
		if at := time.Duration(q + 1); at < l.Period {
			res.RetryAfter = at - e
			return res
		}
	}
	// In the next window Curr becomes Prev; the estimate drops below Count
	// once elapsed > P·(Curr−Count)/Curr, at once when Curr < Count.
	res.RetryAfter = l.Period - e
	if r.Curr >= l.Count {
		x := mul(p, uint64(r.Curr-l.Count))
		q, _ := bits.Div64(x.hi, x.lo, uint64(r.Curr))
		res.RetryAfter += time.Duration(q + 1)
	}
	return res
}

// u128 is an unsigned 128-bit integer, enough for Count·Period in nanoseconds.
type u128 struct{ hi, lo uint64 }

func mul(a, b uint64) u128 {
	hi, lo := bits.Mul64(a, b)
	return u128{hi, lo}
}

func add(a, b u128) u128 {
	lo, carry := bits.Add64(a.lo, b.lo, 0)
	return u128{a.hi + b.hi + carry, lo}
}

func (a u128) less(b u128) bool {
	return a.hi < b.hi || a.hi == b.hi && a.lo < b.lo
}
