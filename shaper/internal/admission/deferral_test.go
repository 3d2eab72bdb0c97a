package admission_test

import (
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
)

// TestDeferralsForgottenWithTheKey: once a key's deferred jobs are all
// re-admitted and its deferred drainer has forgotten the key, a fresh
// submission to a key with room is accepted, not deferred behind
// deferrals that no longer exist (the drainer's Seen covers keys it no
// longer tracks).
func TestDeferralsForgottenWithTheKey(t *testing.T) {
	r := newRig(t, "policies:\n  - {name: p, outflow: 10/s, queue: 1, overflow: defer}\n", admission.Config{})
	if d := r.admit("k"); d.Outcome != admission.Accepted {
		t.Fatalf("first job: %v, want accepted", d.Outcome)
	}
	if d := r.admit("k"); d.Outcome != admission.Deferred {
		t.Fatalf("second job: %v, want deferred", d.Outcome)
	}
	for range 50 { // 5 s: re-admitted, delivered, the key idle and forgotten
		r.advance(100 * time.Millisecond)
	}
	if n := r.dfr.Stats().Queued; n != 0 {
		t.Fatalf("%d deferred jobs left, want 0", n)
	}
	if d := r.admit("k"); d.Outcome != admission.Accepted {
		t.Errorf("a fresh job to the idle key: %v (%s), want accepted", d.Outcome, d.Reason)
	}
}

// A deferred job whose re-admission the store refuses because the drainer
// has not yet seen the jobs that fill its key (just stored, or at start)
// waits for the room, not for the retry backoff: the refusal is no
// attempt. Counted as one, it came a second later (the backoff), a slot
// or more after the time its producer was promised.
func TestReadmissionRefusedAheadOfTheDrainer(t *testing.T) {
	r := newRig(t, "policies:\n  - {name: p, outflow: 4/s, queue: 2, overflow: defer, retry: {attempts: 3, backoff: 100ms}}\n", admission.Config{})
	r.gate.Attach(staleView{r.main, drain.KeyStatus{}}, r.dfr) // the drainer sees the key empty
	for i, want := range []admission.Outcome{admission.Accepted, admission.Accepted, admission.Deferred} {
		if d := r.admit("k"); d.Outcome != want {
			t.Fatalf("job %d: %v (%s), want %v", i, d.Outcome, d.Reason, want)
		}
	}
	// The re-admission is tried while the store is full and the drainer
	// sees room: no attempt is counted, and it is tried again within a
	// slot, not every millisecond.
	for range 20 {
		r.advance(time.Millisecond)
	}
	if len(r.readmitted) != 0 || r.stored() != 2 {
		t.Fatalf("re-admitted %v into a full key (%d stored)", r.readmitted, r.stored())
	}
	if st := r.dfr.Stats(); st.Failed != 0 {
		t.Errorf("the deferred drainer's stats %+v: a refusal of the store counted as a failed attempt", st)
	}
	r.gate.Attach(r.main, r.dfr) // the drainer catches up
	start := r.clock.Now()
	for len(r.readmitted) == 0 && r.clock.Now().Sub(start) < 3*time.Second {
		r.advance(10 * time.Millisecond)
	}
	if took := r.clock.Now().Sub(start); len(r.readmitted) == 0 || took > 600*time.Millisecond {
		t.Errorf("re-admitted %v after %v, want within the room's time (a slot of 250 ms and its hold), not the 1 s backoff", r.readmitted, took)
	}
}
