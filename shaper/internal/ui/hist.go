package ui

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// Durations are counted in log-linear buckets of microseconds: exact below
// 16 µs, then 8 buckets per power of two, so a bucket is at most 12.5 %
// wide and a quantile read at its middle is within 6.25 % of the truth.
// Durations of 2^45 µs (about a year) and more share the last bucket.
const (
	subBuckets = 8
	maxShift   = 41 // the largest bucket shift: [15·2^41, 16·2^41) µs
	numBuckets = (maxShift + 2) * subBuckets
)

// histogram counts durations over one sampling interval. Observe and take
// are safe for concurrent use and take no lock: Observe is one atomic add.
type histogram struct {
	counts [numBuckets]atomic.Uint64
}

// bucketOf returns the bucket of a duration of us microseconds.
func bucketOf(us uint64) int {
	if us < 2*subBuckets {
		return int(us)
	}
	shift := bits.Len64(us) - 4 // us >> shift is in [8, 16)
	if shift > maxShift {
		return numBuckets - 1
	}
	return shift*subBuckets + int(us>>shift)
}

// middle returns the middle of bucket i, in microseconds.
func middle(i int) float64 {
	if i < 2*subBuckets {
		return float64(i)
	}
	shift := i/subBuckets - 1
	low := uint64(i%subBuckets+subBuckets) << shift
	return float64(low) + float64(uint64(1)<<shift)/2
}

// Observe counts d; a negative d counts as zero.
func (h *histogram) Observe(d time.Duration) {
	us := uint64(0)
	if d > 0 {
		us = uint64(d / time.Microsecond)
	}
	h.counts[bucketOf(us)].Add(1)
}

// take returns the counts since the last take and starts counting anew.
// A duration observed during take goes to this interval or the next one,
// never to both.
func (h *histogram) take(into *[numBuckets]uint64) (n uint64) {
	for i := range h.counts {
		into[i] = h.counts[i].Swap(0)
		n += into[i]
	}
	return n
}

// quantile returns the q-quantile (0 < q ≤ 1) in milliseconds of n
// durations counted in counts, or NaN when n is 0.
func quantile(counts *[numBuckets]uint64, n uint64, q float64) float64 {
	if n == 0 {
		return math.NaN()
	}
	rank := uint64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range counts {
		seen += c
		if seen >= rank {
			return middle(i) / 1000
		}
	}
	return middle(numBuckets-1) / 1000
}
