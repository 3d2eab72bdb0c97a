package drain

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/queue"
)

// timedSink notes when each job was delivered.
type timedSink chan time.Time

func (c timedSink) Deliver(context.Context, *Delivery) error {
	c <- time.Now()
	return nil
}

// TestFarSlotHoldsNoJob checks that a key whose next slot is far reads its
// next head only headLead before that slot, so that a key waiting for it
// keeps no job in memory, with every job still delivered in its slot; and
// that a live change of the pace to a sooner slot moves that read too.
func TestFarSlotHoldsNoJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := NewMemQueue("p", 10, MemQueueConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"j1", "j2", "j3"} {
			if _, err := q.Admit(context.Background(), queue.Job{ID: id, Key: "k", Payload: []byte("payload")}); err != nil {
				t.Fatal(err)
			}
		}
		sink := make(timedSink, 3)
		t0 := time.Now()
		d := New(q, sink, Pace{Interval: time.Minute}, Config{Workers: 2})
		t.Cleanup(d.Stop)
		d.Start(t.Context())
		held := func() bool {
			synctest.Wait()
			d.mu.Lock()
			defer d.mu.Unlock()
			return d.keys["k"].head.msg != nil
		}
		if at := (<-sink).Sub(t0); at != 0 {
			t.Fatalf("j1 delivered at %v, want 0s", at)
		}
		if held() {
			t.Errorf("after j1, with the next slot a minute away, the key holds its next job")
		}
		time.Sleep(time.Minute - headLead - time.Millisecond)
		if held() {
			t.Errorf("%v before its slot the key already holds its next job", headLead+time.Millisecond)
		}
		time.Sleep(2 * time.Millisecond)
		if !held() {
			t.Errorf("%v before its slot the key has not read its next job", headLead-time.Millisecond)
		}
		if at := (<-sink).Sub(t0); at != time.Minute {
			t.Errorf("j2 delivered at %v, want 1m0s", at)
		}
		if held() {
			t.Errorf("after j2 the key holds its next job")
		}
		d.SetPace(Pace{Interval: time.Second})
		if at := (<-sink).Sub(t0); at != time.Minute+time.Second {
			t.Errorf("j3 delivered at %v after the interval fell to 1s, want 1m1s", at)
		}
	})
}

// TestFarSlotReadsAsItFrees checks that a key whose slot hold ends within
// headLead of its next slot (1/s: 10 ms before it) reads its next head in
// the step that frees the slot, not in a step of its own 250 ms earlier,
// and still delivers the job in its slot.
func TestFarSlotReadsAsItFrees(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := NewMemQueue("p", 10, MemQueueConfig{})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"j1", "j2"} {
			if _, err := q.Admit(context.Background(), queue.Job{ID: id, Key: "k", Payload: []byte("payload")}); err != nil {
				t.Fatal(err)
			}
		}
		sink := make(timedSink, 2)
		t0 := time.Now()
		d := New(q, sink, Pace{Interval: time.Second}, Config{Workers: 2})
		t.Cleanup(d.Stop)
		d.Start(t.Context())
		state := func() (held bool, pend int) {
			synctest.Wait()
			d.mu.Lock()
			defer d.mu.Unlock()
			k := d.keys["k"]
			return k.head.msg != nil, len(k.pend)
		}
		if at := (<-sink).Sub(t0); at != 0 {
			t.Fatalf("j1 delivered at %v, want 0s", at)
		}
		time.Sleep(time.Second - freeLead - time.Millisecond)
		if held, pend := state(); held || pend != 1 {
			t.Errorf("%v before the slot: head held %v, %d slots held; want no head, j1's slot held", freeLead+time.Millisecond, held, pend)
		}
		time.Sleep(2 * time.Millisecond)
		if held, pend := state(); !held || pend != 0 {
			t.Errorf("%v before the slot: head held %v, %d slots held; want j2 read as j1's slot was freed", freeLead-time.Millisecond, held, pend)
		}
		if at := (<-sink).Sub(t0); at != time.Second {
			t.Errorf("j2 delivered at %v, want 1s", at)
		}
	})
}
