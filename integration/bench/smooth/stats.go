package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// row is what one side measured at one shape in one round.
type row struct {
	side  string // "shaper" or "nginx"
	shape shape
	round int

	secs        float64 // the window
	arrivals    int     // in the window, all keys
	gaps        int     // between two arrivals of a key in the window
	spanned     int64   // the nanoseconds those gaps add up to
	keysSeen    int     // keys with an arrival in the window
	p50, p99    time.Duration
	maxDev      time.Duration // the largest |gap − period|
	minGap      time.Duration
	maxInWindow int // the most arrivals of one key in any window
	bound       int // ⌈window·rate⌉+1
	cpuSecs     float64
}

// rateError is how far the rate reached is from the one asked, as a
// fraction of it: the mean gap's rate, which the window's edges do not
// skew, times the keys seen against every key's rate.
func (r row) rateError() float64 {
	if r.spanned == 0 {
		return -1
	}
	got := float64(r.gaps) / (float64(r.spanned) / 1e9) * float64(r.keysSeen) / float64(r.shape.keys)
	return got/float64(r.shape.rate) - 1
}

// cpuPer is the CPU microseconds the server side spent per delivery.
func (r row) cpuPer() float64 {
	if r.arrivals == 0 {
		return 0
	}
	return r.cpuSecs * 1e6 / float64(r.arrivals)
}

func (r row) summary() string {
	return fmt.Sprintf("%s %v round %d: %d arrivals on %d keys, rate error %+.2f %%, |gap − period| p50 %s p99 %s max %s, shortest gap %s, most in a window %d (bound %d), %.0f CPU-µs/delivery",
		r.side, r.shape, r.round, r.arrivals, r.keysSeen, 100*r.rateError(), ms(r.p50), ms(r.p99), ms(r.maxDev), ms(r.minGap), r.maxInWindow, r.bound, r.cpuPer())
}

// ms formats d in milliseconds with two decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

// readArrivals reads a consumer's "key nanoseconds" lines into each key's
// arrival times, in order.
func readArrivals(path string) (map[string][]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	arr := map[string][]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		t, err := strconv.ParseInt(v, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("%s: bad line %q", path, sc.Text())
		}
		arr[k] = append(arr[k], t)
	}
	for _, ts := range arr {
		slices.Sort(ts)
	}
	return arr, sc.Err()
}

// measure computes a row from the arrivals within [from, to) (Unix
// nanoseconds): every gap between two consecutive arrivals of a key that
// both fall in it, and the most arrivals of a key in any window.
func measure(side string, sh shape, round int, arr map[string][]int64, from, to int64, window time.Duration) row {
	r := row{side: side, shape: sh, round: round, secs: float64(to-from) / 1e9, minGap: time.Duration(math.MaxInt64)}
	r.bound = int(math.Ceil(window.Seconds()*float64(sh.rate))) + 1
	period := int64(time.Second) / int64(sh.rate)
	var devs []int64
	for _, ts := range arr {
		lo, _ := slices.BinarySearch(ts, from)
		hi, _ := slices.BinarySearch(ts, to)
		in := ts[lo:hi]
		if len(in) == 0 {
			continue
		}
		r.keysSeen++
		r.arrivals += len(in)
		r.gaps += len(in) - 1
		r.spanned += in[len(in)-1] - in[0]
		for i := 1; i < len(in); i++ {
			gap := in[i] - in[i-1]
			devs = append(devs, abs(gap-period))
			r.minGap = min(r.minGap, time.Duration(gap))
		}
		j := 0
		for i := range in {
			for in[i]-in[j] >= int64(window) {
				j++
			}
			r.maxInWindow = max(r.maxInWindow, i-j+1)
		}
	}
	if len(devs) == 0 {
		r.minGap = 0
		return r
	}
	slices.Sort(devs)
	at := func(q float64) time.Duration { return time.Duration(devs[int(q*float64(len(devs)-1))]) }
	r.p50, r.p99, r.maxDev = at(0.50), at(0.99), time.Duration(devs[len(devs)-1])
	return r
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
