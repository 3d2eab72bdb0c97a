package admission_test

import (
	"testing"
	"time"

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
