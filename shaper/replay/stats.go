package replay

import (
	"math"
	"math/bits"
	"time"
)

// histogram counts durations in log-linear buckets: exact below 256 ns,
// then 128 buckets per doubling, so a quantile is off by less than 0.8 %.
// Its size is fixed (about 60 KB), however many values it counts.
type histogram struct {
	counts [256 + 56*128]uint64
	n      uint64
	max    time.Duration
}

func bucketOf(v uint64) int {
	if v < 256 {
		return int(v)
	}
	e := bits.Len64(v) - 8
	return 256 + (e-1)*128 + int(v>>e) - 128
}

// lowest returns the smallest value of bucket i.
func lowest(i int) uint64 {
	if i < 256 {
		return uint64(i)
	}
	e := (i-256)/128 + 1
	return uint64((i-256)%128+128) << e
}

func (h *histogram) add(d time.Duration) {
	d = max(d, 0)
	h.counts[bucketOf(uint64(d))]++
	h.n++
	h.max = max(h.max, d)
}

// quantile returns the nearest-rank q-quantile (0 < q ≤ 1): the middle of
// its bucket, never above the largest value counted. 0 when empty.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := lowest(i), lowest(i+1)
			return min(time.Duration(lo+(hi-lo)/2), h.max)
		}
	}
	return h.max
}

// window counts the events of the last second, the closed window the
// sink of cmd/producer measures and the drain's bound speaks of (at most
// ⌈T·rate⌉+1 in any window of length T). peak is the most it ever held.
type window struct {
	times []int64 // Unix nanoseconds, oldest first from head
	head  int
	peak  int
}

func (w *window) add(at int64) {
	for w.head < len(w.times) && at-w.times[w.head] > int64(time.Second) {
		w.head++
	}
	if w.head > 64 && w.head > len(w.times)/2 {
		w.times = append(w.times[:0], w.times[w.head:]...)
		w.head = 0
	}
	w.times = append(w.times, at)
	w.peak = max(w.peak, len(w.times)-w.head)
}

// last returns the time of the latest event, 0 when none.
func (w *window) last() int64 {
	if len(w.times) == 0 {
		return 0
	}
	return w.times[len(w.times)-1]
}

// Series is a replay over the time of its trace, in Points of equal Step:
// what a plot draws. It has at most maxPoints points, however long the
// trace: when it would have more, pairs of points merge and Step doubles.
type Series struct {
	Step   time.Duration
	Points []Point
}

// Point is a Series over one Step, from its index times Step.
type Point struct {
	// Queued is the most jobs queued over all keys seen in the step
	// (sampled at its start, and at the start of the steps it merged).
	Queued int64
	// Deliveries counts the jobs delivered in the step; WaitSum and
	// WaitMax are their total and longest time in queue.
	Deliveries uint64
	WaitSum    time.Duration
	WaitMax    time.Duration
}

// MeanWait returns the mean time in queue of the jobs delivered in the
// step, 0 when none was.
func (p Point) MeanWait() time.Duration {
	if p.Deliveries == 0 {
		return 0
	}
	return p.WaitSum / time.Duration(p.Deliveries)
}

const (
	maxPoints   = 1024
	initialStep = 100 * time.Millisecond
)

func newSeries() *Series { return &Series{Step: initialStep} }

// at returns the point of time since (from the trace's start), making it
// and every point before it, and whether it is new.
func (s *Series) at(since time.Duration) (*Point, bool) {
	i := int(max(since, 0) / s.Step)
	for i >= maxPoints {
		s.halve()
		i = int(max(since, 0) / s.Step)
	}
	fresh := i >= len(s.Points)
	for len(s.Points) <= i {
		s.Points = append(s.Points, Point{})
	}
	return &s.Points[i], fresh
}

// halve merges pairs of points, doubling the step.
func (s *Series) halve() {
	merged := s.Points[:0]
	for i := 0; i < len(s.Points); i += 2 {
		p := s.Points[i]
		if i+1 < len(s.Points) {
			q := s.Points[i+1]
			p.Queued = max(p.Queued, q.Queued)
			p.Deliveries += q.Deliveries
			p.WaitSum += q.WaitSum
			p.WaitMax = max(p.WaitMax, q.WaitMax)
		}
		merged = append(merged, p)
	}
	s.Points, s.Step = merged, 2*s.Step
}
