package drain

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Reasons a job is dead-lettered with.
const (
	ReasonDelivery = "delivery" // delivery attempts ran out
	ReasonAttempts = "attempts" // deferral attempts ran out
	ReasonDeadline = "deadline" // Retry.Deadline passed
)

// maxHistory bounds the attempts a dead letter recounts.
const maxHistory = 32

// failed applies a failed delivery of k's held job at now: it decides
// whether the failure counts, when to try again, and whether to give up,
// and leaves the event to report in s.failure. d.mu must be held.
func (d *Drainer) failed(k *keyState, s *step, now time.Time) {
	retry := d.pace.Retry
	var (
		pause  *RetryAfterError
		giveUp *GiveUpError
		wait   time.Duration
		counts = true
	)
	switch {
	case errors.As(s.err, &giveUp):
		k.deadReason = giveUp.Reason
	case errors.As(s.err, &pause) && pause.NotAttempted:
		wait, counts = pause.After, false
	case errors.As(s.err, &pause) && !d.cfg.CountPauses:
		wait, counts = pause.After, false
		k.held.Attempt++
	default:
		k.held.Attempt++
		wait = retry.wait(k.failures+1, d.cfg.Jitter())
		if pause != nil {
			_, ceiling := retry.bounds()
			wait = min(max(wait, pause.After), ceiling)
		}
	}
	if pause == nil || !pause.NotAttempted {
		d.failures.Add(1) // a sink that did not try did not fail
	}
	if counts && k.deadReason == "" {
		k.failures++
		if n := retry.Attempts; n > 0 && k.failures >= n && d.cfg.DeadLetter != nil {
			k.deadReason = d.cfg.FailReason
		}
	}
	if deadline := retry.Deadline; deadline > 0 && k.deadReason == "" && d.cfg.DeadLetter != nil {
		end := k.held.EnqueuedAt.Add(deadline)
		if !now.Before(end) {
			k.deadReason = ReasonDeadline
		} else if now.Add(wait).After(end) {
			wait = end.Sub(now) // look again when the deadline passes
		}
	}
	if k.deadReason != "" {
		wait = 0
		if d.cfg.DeadLetter == nil {
			k.deadReason = "" // nowhere to put it: keep retrying
			wait = retry.wait(k.failures, d.cfg.Jitter())
		}
	}
	k.due = now.Add(wait)
	if pause != nil && pause.NotAttempted {
		// Waiting for room is not an attempt; say once that it waited.
		if n := len(k.history); n == 0 || !strings.Contains(k.history[n-1], " waiting: ") {
			k.history = append(k.history, fmt.Sprintf("%s waiting: %s", s.started.UTC().Format(time.RFC3339Nano), pause.Cause))
		}
	} else {
		k.history = append(k.history, fmt.Sprintf("%s attempt %d: %v", s.started.UTC().Format(time.RFC3339Nano), k.held.Attempt-1, s.err))
		if len(k.history) > maxHistory {
			k.history = k.history[len(k.history)-maxHistory:]
		}
		d.log.Warn("drain: delivery failed", "key", k.name, "job", k.held.ID, "failures", k.failures, "retry_in", wait, "err", s.err)
	}
	// Reported once complete, before the key is released: a job's dead
	// letter or the key's next delivery (its next step) cannot overtake it.
	s.failure = &Event{Key: k.held.Key, ID: k.held.ID, Attempt: k.held.Attempt, Enqueued: k.held.EnqueuedAt, Scheduled: s.scheduled,
		Started: s.started, Err: s.err, RetryAt: k.due}
}
