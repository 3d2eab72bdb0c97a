package drain_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// BenchmarkStartIn asks for the start of a key's last job under a binding
// total cap, with keys waiting (the admission of a job: its ETA).
func BenchmarkStartIn(b *testing.B) {
	for _, keys := range []int{10, 256, 1000, 4000} {
		b.Run(fmt.Sprint(keys, "keys"), func(b *testing.B) {
			r := newReplay(b, 100, drain.Pace{Interval: time.Millisecond, Total: time.Second}, drain.Config{})
			r.quiet = true
			ctx := context.Background()
			for i := range keys * 3 {
				if _, err := r.q.Admit(ctx, queue.Job{ID: fmt.Sprint(i), Key: fmt.Sprintf("k%d", i%keys)}); err != nil {
					b.Fatal(err)
				}
			}
			now := r.clock.Now()
			r.d.Advance(ctx, now)
			b.ResetTimer()
			for i := range b.N {
				r.d.StartIn(fmt.Sprintf("k%d", i%keys), 3, now)
			}
		})
	}
}
