package admission

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// Storage is full from a refusal for want of storage until a job is
// stored, or StorageHold after the last refusal; other failures say
// nothing of room.
func TestStorage(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	refused := fmt.Errorf("queue: admit: %w", queue.ErrStorageFull)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	steps := []struct {
		name     string
		now      time.Time
		answer   error // the store's answer at now, when observed (nil: stored)
		full     bool
		since    time.Time
		observed bool
	}{
		{name: "empty", now: at(0), full: false},
		{name: "refused", now: at(0), answer: refused, observed: true, full: true, since: at(0)},
		{name: "timeout says nothing", now: at(time.Second), answer: queue.ErrUnavailable, observed: true, full: true, since: at(0)},
		{name: "refused again", now: at(5 * time.Second), answer: refused, observed: true, full: true, since: at(0)},
		{name: "held from the last refusal", now: at(14 * time.Second), full: true, since: at(0)},
		{name: "hold over", now: at(15 * time.Second), full: false},
		{name: "a new spell", now: at(20 * time.Second), answer: refused, observed: true, full: true, since: at(20 * time.Second)},
		{name: "a job stored", now: at(21 * time.Second), observed: true, full: false},
	}
	var s Storage
	for _, st := range steps {
		if st.observed {
			s.observe(st.answer, st.now)
		}
		since, refusal, full := s.Full(st.now)
		if full != st.full || !since.Equal(st.since) || full && !errors.Is(refusal, queue.ErrStorageFull) {
			t.Errorf("%s: Full(%v) = %v, %v, %v; want %v since %v", st.name, st.now.Sub(t0), since.Sub(t0), refusal, full, st.full, st.since.Sub(t0))
		}
	}
	var none *Storage
	none.observe(refused, t0)
	if _, _, full := none.Full(t0); full {
		t.Error("a nil Storage is full")
	}
}
