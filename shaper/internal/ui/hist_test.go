package ui

import (
	"math"
	"testing"
	"time"
)

// A duration's bucket's middle is within 6.25 % of it, and buckets grow
// with the duration.
func TestBucketsBoundTheError(t *testing.T) {
	last := -1
	for us := uint64(0); us < 1<<46; us = us*17/16 + 1 {
		b := bucketOf(us)
		if b < last || b >= numBuckets {
			t.Fatalf("bucketOf(%d) = %d after %d (of %d buckets)", us, b, last, numBuckets)
		}
		last = b
		if us >= 1<<45 {
			continue // the last bucket holds everything from there on
		}
		if got := middle(b); math.Abs(got-float64(us)) > 0.0625*float64(us)+0.5 {
			t.Errorf("middle(bucketOf(%d µs)) = %v µs, more than 6.25 %% off", us, got)
		}
	}
}

func TestQuantiles(t *testing.T) {
	var h histogram
	var counts [numBuckets]uint64
	if n := h.take(&counts); !math.IsNaN(quantile(&counts, n, 0.5)) {
		t.Errorf("quantile of nothing = %v, want NaN", quantile(&counts, n, 0.5))
	}
	for i := 1; i <= 1000; i++ {
		h.Observe(time.Duration(i) * time.Millisecond)
	}
	h.Observe(-time.Second) // counts as zero
	n := h.take(&counts)
	if n != 1001 {
		t.Fatalf("take counted %d durations, want 1001", n)
	}
	for _, c := range []struct{ q, want float64 }{{0.5, 500}, {0.99, 990}, {1, 1000}} {
		if got := quantile(&counts, n, c.q); math.Abs(got-c.want) > 0.0625*c.want {
			t.Errorf("quantile(%v) of 0..1000 ms = %v ms, want %v ± 6.25 %%", c.q, got, c.want)
		}
	}
	if again := h.take(&counts); again != 0 {
		t.Errorf("take after take counted %d, want 0: each interval starts anew", again)
	}
}
