package recording

import (
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper/internal/admission"
)

// BenchmarkObserve is what recording costs a submission: while nobody
// records the policy (one atomic load), and while somebody does (a row
// appended under the policy's lock; the batches are not published here).
func BenchmarkObserve(b *testing.B) {
	r := New(Config{Policies: func() []string { return []string{"p"} }})
	observe := r.Observe("p")
	now := time.Now()
	b.Run("off", func(b *testing.B) {
		for range b.N {
			observe("tenant-42", 64, now, admission.Accepted)
		}
	})
	b.Run("recording", func(b *testing.B) {
		p := r.policy("p")
		p.until.Store(now.Add(time.Hour).UnixNano())
		for i := range b.N {
			observe("tenant-42", 64, now, admission.Accepted)
			if i%1000 == 999 {
				p.mu.Lock()
				p.buf, p.rows = p.buf[:0], 0
				p.mu.Unlock()
			}
		}
	})
}
