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
		{"failed attempt", drain.Event{ID: "j", Key: "k", Attempt: 2, Err: fail, RetryAt: next, Attempted: true},
			&Record{ID: "j", Policy: "p", Key: "k", Status: Queued, Attempts: 1, NextTry: next, LastError: fail.Error()},
			&Record{ID: "j", Policy: "p", Key: "k", Status: Deferred, Deferrals: 1, NextTry: next, LastError: fail.Error()}},
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
				got.Deferrals != f.want.Deferrals || !got.NextTry.Equal(f.want.NextTry) || got.LastError != f.want.LastError || got.Key != f.want.Key):
				t.Errorf("%s: %s = %+v, %v; want %+v", tt.name, f.what, got, ok, *f.want)
			}
		}
	}
}
