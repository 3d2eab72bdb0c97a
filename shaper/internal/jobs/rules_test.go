package jobs

import (
	"errors"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
)

// The record rules: which drain events leave a job record, and which.
func TestRecordRules(t *testing.T) {
	next := time.Date(2026, 1, 1, 0, 0, 5, 0, time.UTC)
	fail := errors.New("downstream: 500")
	wait := &drain.RetryAfterError{After: time.Second, Cause: "no responders", NotAttempted: true}
	tests := []struct {
		name     string
		e        drain.Event
		delivery *Record // FromDelivery's, nil: none
		readmit  *Record // FromReadmission's, nil: none
	}{
		{"delivered", drain.Event{ID: "j", Key: "k", Attempt: 3, Attempted: true},
			&Record{ID: "j", Policy: "p", Key: "k", Status: Delivered, Attempts: 3}, nil},
		{"failed attempt", drain.Event{ID: "j", Key: "k", Attempt: 2, Err: fail, RetryAt: next, Attempted: true, Failures: 1},
			&Record{ID: "j", Policy: "p", Key: "k", Status: Queued, Attempts: 1, NextTry: next, LastError: fail.Error()},
			&Record{ID: "j", Policy: "p", Key: "k", Status: Deferred, Deferrals: 1, NextTry: next, LastError: fail.Error()}},
		{"paused by the downstream", drain.Event{ID: "j", Key: "k", Attempt: 3, Err: fail, RetryAt: next, Attempted: true, Failures: 1, Paused: true},
			&Record{ID: "j", Policy: "p", Key: "k", Status: Queued, Attempts: 2, Pauses: 1, Paused: true, NextTry: next, LastError: fail.Error()},
			&Record{ID: "j", Policy: "p", Key: "k", Status: Deferred, Deferrals: 2, NextTry: next, LastError: fail.Error()}},
		{"waiting, not an attempt", drain.Event{ID: "j", Key: "k", Attempt: 1, Err: wait, RetryAt: next}, nil, nil},
		{"dead-lettered", drain.Event{ID: "j", Key: "k", Attempt: 4, Reason: drain.ReasonDelivery}, nil, nil},
	}
	for _, tt := range tests {
		for _, f := range []struct {
			what string
			fn   func(string, drain.Event) (Record, bool)
			want *Record
		}{{"FromDelivery", FromDelivery, tt.delivery}, {"FromReadmission", FromReadmission, tt.readmit}} {
			got, ok := f.fn("p", tt.e)
			switch {
			case f.want == nil && ok:
				t.Errorf("%s: %s = %+v, want no record", tt.name, f.what, got)
			case f.want != nil && (!ok || got.ID != f.want.ID || got.Status != f.want.Status || got.Attempts != f.want.Attempts ||
				got.Deferrals != f.want.Deferrals || !got.NextTry.Equal(f.want.NextTry) || got.LastError != f.want.LastError || got.Key != f.want.Key ||
				got.Pauses != f.want.Pauses || got.Paused != f.want.Paused):
				t.Errorf("%s: %s = %+v, %v; want %+v", tt.name, f.what, got, ok, *f.want)
			}
		}
	}
}

// What a record gives back to the drainer that takes its job on: its
// failures apart from its pauses, and its next try; a record written
// before pauses were kept apart counts every attempt as failed.
func TestRecordResumed(t *testing.T) {
	next := time.Date(2026, 1, 1, 0, 10, 0, 0, time.UTC)
	rec, _ := FromDelivery("p", drain.Event{ID: "j", Key: "k", Attempt: 4, Err: errors.New("429"), RetryAt: next, Attempted: true, Failures: 1, Paused: true, History: []string{"h"}})
	if got := rec.Resumed(); got.Attempts != 3 || got.Failures != 1 || !got.Paused || !got.RetryAt.Equal(next) || len(got.History) != 1 {
		t.Errorf("Resumed() = %+v, want 3 attempts, 1 failure, paused until %v, its history", got, next)
	}
	old := Record{ID: "j", Status: Queued, Attempts: 2, NextTry: next}
	if got := old.Resumed(); got.Attempts != 2 || got.Failures != 2 || got.Paused {
		t.Errorf("an older record's Resumed() = %+v, want 2 attempts, 2 failures", got)
	}
}
