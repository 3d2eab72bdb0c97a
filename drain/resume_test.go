package drain_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// A job whose attempts before a restart (or a take-over) ended in a backoff,
// or in a pause the downstream asked for, waits it out after the restart:
// it was tried again at once (a tour saw a webhook's 10-minute Retry-After
// ignored after a kill -9, and every failed job of an outage fired again
// by each restart), and a pause counted as a failed attempt, so three
// restarts dead-lettered a job that had only been asked to wait.
func TestResumeKeepsBackoffAndPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev events
		start := time.Now()
		before := map[string]drain.Resumed{
			"backoff-0": {Attempts: 1, Failures: 1, RetryAt: start.Add(30 * time.Second)},
			"paused-0":  {Attempts: 3, Failures: 0, RetryAt: start.Add(10 * time.Minute), Paused: true},
			"past-0":    {Attempts: 1, Failures: 1, RetryAt: start.Add(-time.Minute)},
		}
		r := newMemRig(t, 50, drain.Pace{Interval: 10 * time.Millisecond, Retry: drain.Retry{Attempts: 3, Budget: 0.2}}, drain.Config{
			DeadLetter: ev.deadLetter,
			Resume: func(_ context.Context, m *queue.Msg) drain.Resumed {
				return before[m.ID]
			},
		})
		r.admit("backoff", 2)
		r.admit("paused", 2)
		r.admit("past", 1)
		r.d.Start(t.Context())
		r.sink.wait(t, 5, time.Hour)
		at := map[string]time.Duration{}
		for _, d := range r.sink.deliveries() {
			at[d.id] = d.at.Sub(start)
		}
		if got := at["backoff-0"]; got < 30*time.Second || got > 31*time.Second {
			t.Errorf("backoff-0 delivered %v after the restart, want at the end of its backoff (30s)", got)
		}
		if got := at["backoff-1"]; got > time.Second {
			t.Errorf("backoff-1 delivered %v after the restart, want at once (the failed head steps aside with a budget)", got)
		}
		if got := at["paused-0"]; got < 10*time.Minute || got > 10*time.Minute+time.Second {
			t.Errorf("paused-0 delivered %v after the restart, want at the end of the pause (10m)", got)
		}
		if got := at["paused-1"]; got < 10*time.Minute {
			t.Errorf("paused-1 delivered %v after the restart, want after the pause (10m): the downstream paused the key", got)
		}
		if got := at["past-0"]; got > time.Second {
			t.Errorf("past-0 delivered %v after the restart, want at once (its backoff ended before)", got)
		}
		if len(ev.letters) != 0 {
			t.Errorf("dead letters %+v, want none: 3 pauses are not 3 failed attempts", ev.letters)
		}
	})
}

// The deadline bounds retries and re-admissions: a job never attempted,
// waiting for a consumer to come online, is neither, and stays queued past
// it (a tour saw every job of a key without a consumer dead-lettered with
// 0 attempts at the deadline). A job that failed and then waits for a
// consumer is a retry: past the deadline it is dead-lettered.
func TestDeadlineSparesJobsWaitingForAConsumer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ev events
		r := newMemRig(t, 50, drain.Pace{Interval: 10 * time.Millisecond, Retry: drain.Retry{Attempts: 100, Deadline: 2 * time.Second}}, drain.Config{
			DeadLetter: ev.deadLetter,
		})
		r.sink.setFail(func(d *drain.Delivery) error {
			if d.Msg.Key == "failed" && d.Msg.Attempt == 1 {
				return fmt.Errorf("%w: refused", drain.ErrDelivery)
			}
			return &drain.RetryAfterError{After: 50 * time.Millisecond, Cause: "no responders", NotAttempted: true}
		})
		r.admit("waiting", 3)
		r.admit("failed", 1)
		r.d.Start(t.Context())
		time.Sleep(5 * time.Second) // past the deadline
		r.sink.setFail(nil)         // a consumer comes online
		r.sink.wait(t, 3, time.Minute)
		synctest.Wait()
		var got []string
		for _, d := range r.sink.deliveries() {
			got = append(got, d.id)
		}
		if fmt.Sprint(got) != "[waiting-0 waiting-1 waiting-2]" {
			t.Errorf("delivered %v, want waiting-0..2, queued past the deadline while no consumer was online", got)
		}
		if len(ev.letters) != 1 || ev.letters[0].id != "failed-0" || ev.letters[0].reason != drain.ReasonDeadline ||
			!strings.Contains(fmt.Sprint(ev.letters[0].history), "attempt 1: ") {
			t.Errorf("dead letters %+v, want failed-0's alone (a retry past its deadline)", ev.letters)
		}
	})
}
