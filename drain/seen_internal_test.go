package drain

import (
	"context"
	"sync"
	"testing"
	"time"
)

// A wait for a sequence the watch never reports (a job removed before the
// watch read it, the stream's last sequence while it idles) is dropped
// when it ends: a review found every such wait kept for good, one per
// passive partition every 2 s on an idle queue.
func TestSeenWaitDroppedWhenItEnds(t *testing.T) {
	var mu sync.Mutex
	w := seenMark{seq: 3}
	for range 100 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		if w.await(ctx, &mu, 7) {
			t.Fatal("awaitSeen(7) = true with 3 seen")
		}
		cancel()
	}
	mu.Lock()
	if n := len(w.waiting); n != 0 {
		t.Errorf("%d waits still registered after they ended, want none", n)
	}
	mu.Unlock()
	go func() {
		mu.Lock()
		w.advance(7)
		mu.Unlock()
	}()
	if !w.await(context.Background(), &mu, 7) {
		t.Fatal("awaitSeen(7) = false once 7 was seen")
	}
	mu.Lock()
	defer mu.Unlock()
	if n := len(w.waiting); n != 0 {
		t.Errorf("%d waits still registered, want none", n)
	}
}
