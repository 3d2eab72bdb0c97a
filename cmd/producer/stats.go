package main

import (
	"math"
	"slices"
	"time"
)

// keyStats accumulates what the sink measures for one stream of deliveries
// (one key, or all keys together for the totals). Deliveries must be added in
// arrival order. The zero value is ready to use; it is not safe for concurrent
// use.
type keyStats struct {
	deliveries int
	duplicates int
	ids        map[string]int // job id → times delivered

	first, last time.Time
	gaps        []time.Duration // between consecutive deliveries
	latencies   []time.Duration // receive time minus Shaper-Enqueued-At

	// window holds the arrival times of the last second, oldest first from
	// window[head]; windowMax is the most it ever held.
	window    []time.Time
	head      int
	windowMax int
}

// statsWindow is the length of the sliding window whose maximum count the sink
// reports. The window is closed: deliveries exactly one window apart count
// together, which is how the shaper's guarantee (at most ⌈T·rate⌉+1 in any
// window of length T) is stated.
const statsWindow = time.Second

// add records one delivery of job id received at at. enqueued is the job's
// Shaper-Enqueued-At time, zero when unknown. An empty id counts as a
// delivery but is not tracked for duplicates. add reports whether id was new.
func (k *keyStats) add(id string, at, enqueued time.Time) (isNew bool) {
	if k.deliveries == 0 {
		k.first = at
	} else {
		k.gaps = append(k.gaps, at.Sub(k.last))
	}
	k.last = at
	k.deliveries++

	if id != "" {
		if k.ids == nil {
			k.ids = make(map[string]int)
		}
		n := k.ids[id]
		k.ids[id] = n + 1
		if n > 0 {
			k.duplicates++
		}
		isNew = n == 0
	}
	if !enqueued.IsZero() {
		k.latencies = append(k.latencies, at.Sub(enqueued))
	}

	for k.head < len(k.window) && at.Sub(k.window[k.head]) > statsWindow {
		k.head++
	}
	if k.head > 1024 && k.head > len(k.window)/2 {
		k.window = append(k.window[:0], k.window[k.head:]...)
		k.head = 0
	}
	k.window = append(k.window, at)
	k.windowMax = max(k.windowMax, len(k.window)-k.head)
	return isNew
}

// distinct is the number of different job ids delivered.
func (k *keyStats) distinct() int { return len(k.ids) }

// rate is the achieved delivery rate in deliveries per second:
// (deliveries-1)/(last-first). It is 0 with fewer than two deliveries or when
// they all arrived at the same instant.
func (k *keyStats) rate() float64 {
	span := k.last.Sub(k.first)
	if k.deliveries < 2 || span <= 0 {
		return 0
	}
	return float64(k.deliveries-1) / span.Seconds()
}

// busyRate is the delivery rate over a stream's busy stretches, given its
// gaps sorted ascending: a gap longer than idleGap(median gap) is time
// nobody sent anything, left out with the delivery ending it. With no such
// gap it is keyStats.rate. idle counts the gaps left out.
func busyRate(sorted []time.Duration) (rate float64, idle int) {
	limit := idleGap(percentile(sorted, 0.5))
	n, _ := slices.BinarySearch(sorted, limit+1) // the gaps up to limit
	var busy time.Duration
	for _, g := range sorted[:n] {
		busy += g
	}
	if busy <= 0 {
		return 0, len(sorted) - n
	}
	return float64(n) / busy.Seconds(), len(sorted) - n
}

// idleGap is the longest gap between two deliveries that still counts as
// busy, given the median gap: twice it, and at least a second.
func idleGap(median time.Duration) time.Duration { return max(2*median, time.Second) }

// keySummary is the report of one keyStats, as printed by the sink.
type keySummary struct {
	Policy     string  `json:"policy,omitempty"` // per key: the policy the key's deliveries came from
	Key        string  `json:"key"`
	Deliveries int     `json:"deliveries"`
	Distinct   int     `json:"distinct"`
	Duplicates int     `json:"duplicates"`
	RatePerSec float64 `json:"rate_per_s"`
	// BusyRatePerSec leaves out the idle stretches (busyRate); IdleGaps
	// counts them.
	BusyRatePerSec float64 `json:"busy_rate_per_s"`
	IdleGaps       int     `json:"idle_gaps,omitempty"`
	GapMinMs       float64 `json:"gap_min_ms"`
	GapP50Ms       float64 `json:"gap_p50_ms"`
	GapP99Ms       float64 `json:"gap_p99_ms"`
	MaxPerSecond   int     `json:"max_in_1s"`
	LatencyP50Ms   float64 `json:"queue_latency_p50_ms"`
	LatencyP99Ms   float64 `json:"queue_latency_p99_ms"`
}

// summary reports k under the name key.
func (k *keyStats) summary(key string) keySummary {
	gaps := sortedCopy(k.gaps)
	lat := sortedCopy(k.latencies)
	s := keySummary{
		Key:          key,
		Deliveries:   k.deliveries,
		Distinct:     k.distinct(),
		Duplicates:   k.duplicates,
		RatePerSec:   k.rate(),
		GapP50Ms:     ms(percentile(gaps, 0.50)),
		GapP99Ms:     ms(percentile(gaps, 0.99)),
		MaxPerSecond: k.windowMax,
		LatencyP50Ms: ms(percentile(lat, 0.50)),
		LatencyP99Ms: ms(percentile(lat, 0.99)),
	}
	if len(gaps) > 0 {
		s.GapMinMs = ms(gaps[0])
	}
	s.BusyRatePerSec, s.IdleGaps = busyRate(gaps)
	return s
}

// sortedCopy returns ds sorted ascending, leaving ds as it is.
func sortedCopy(ds []time.Duration) []time.Duration {
	c := slices.Clone(ds)
	slices.Sort(c)
	return c
}

// percentile returns the nearest-rank p-th percentile (0 < p ≤ 1) of sorted,
// which must be sorted ascending; 0 when sorted is empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ms converts d to fractional milliseconds, rounded to microseconds.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}
