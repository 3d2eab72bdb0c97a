package drain

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Reasons a job is dead-lettered with.
const (
	ReasonDelivery = "delivery" // delivery attempts ran out
	ReasonAttempts = "attempts" // deferral attempts ran out
	ReasonDeadline = "deadline" // Retry.Deadline passed
	// ReasonUndecodable: the job's message is not one the shaper stored
	// (queue.Msg.Undecodable says why), so nobody can tell what to deliver.
	ReasonUndecodable = "undecodable"
)

// maxHistory bounds the attempts a dead letter recounts.
const maxHistory = 32

// failed applies a failed delivery of k's job t at now: it decides whether
// the failure counts, when to try again, and whether to give up, and leaves
// the event to report in s.failure. A pause the sink asks for pauses the
// whole key. d.mu must be held.
func (d *Drainer) failed(k *keyState, t *tried, s *step, now time.Time) {
	retry := d.pace.Retry
	var (
		pause  *RetryAfterError
		giveUp *GiveUpError
		wait   time.Duration
		counts = true
	)
	switch {
	case errors.As(s.err, &giveUp):
		t.deadReason = giveUp.Reason
	case errors.As(s.err, &pause) && pause.NotAttempted:
		wait, counts = pause.After, false
	case errors.As(s.err, &pause) && !d.cfg.CountPauses:
		wait, counts = pause.After, false
		t.msg.Attempt++
	default:
		t.msg.Attempt++
		wait = retry.wait(t.failures+1, d.cfg.Jitter())
		if pause != nil {
			_, ceiling := retry.bounds()
			wait = min(max(wait, pause.After), ceiling)
		}
	}
	if Attempted(s.err) {
		t.retrying = true
		d.failures.Add(1) // a sink that did not try did not fail
	}
	if counts && t.deadReason == "" {
		t.failures++
		t.deadReason = d.outOf(t, now)
	}
	if deadline := retry.Deadline; deadline > 0 && t.deadReason == "" && d.cfg.DeadLetter != nil {
		end := t.msg.EnqueuedAt.Add(deadline)
		if !now.Before(end) {
			t.deadReason = ReasonDeadline // a failure that did not count
		} else if now.Add(wait).After(end) {
			wait = end.Sub(now) // look again when the deadline passes
		}
	}
	if t.deadReason != "" {
		wait = 0
		if d.cfg.DeadLetter == nil {
			t.deadReason = "" // nowhere to put it: keep retrying
			wait = retry.wait(t.failures, d.cfg.Jitter())
		}
	}
	t.due = now.Add(wait)
	t.paused = pause != nil
	if t.paused {
		k.next = instantOf(maxTime(k.next.time(), t.due)) // the downstream asked the key to wait
		k.paused = instantOf(maxTime(k.paused.time(), t.due))
	}
	// The retry waits for its backoff and for the key's next slot: the
	// later of the two is when it runs, as the log and the event say.
	retryAt := t.due
	if t.deadReason == "" {
		retryAt = maxTime(retryAt, k.next.time())
	}
	if pause != nil && pause.NotAttempted {
		// Waiting for room is not an attempt; say once that it waited.
		if n := len(t.history); n == 0 || !strings.Contains(t.history[n-1], " waiting: ") {
			t.history = append(t.history, fmt.Sprintf("%s waiting: %s", s.started.UTC().Format(time.RFC3339Nano), pause.Cause))
		}
	} else {
		t.note(fmt.Sprintf("%s attempt %d: %v", s.started.UTC().Format(time.RFC3339Nano), t.msg.Attempt-1, s.err))
		if t.deadReason != "" { // no retry follows: say what does
			d.log.Warn("drain: delivery failed", "key", k.name, "job", t.msg.ID, "failures", t.failures,
				"next", "dead letter", "reason", t.deadReason, "err", s.err)
		} else {
			d.log.Warn("drain: delivery failed", "key", k.name, "job", t.msg.ID, "failures", t.failures,
				"retry_in", max(retryAt.Sub(now), 0).Round(time.Millisecond), "backoff", wait.Round(time.Millisecond), "err", s.err)
		}
	}
	// Reported once complete, before the key is released: a job's dead
	// letter or the key's next delivery (its next step) cannot overtake it.
	s.failure = &Event{Key: t.msg.Key, ID: t.msg.ID, Attempt: t.msg.Attempt, Enqueued: t.msg.EnqueuedAt, Scheduled: s.scheduled, History: slices.Clone(t.history),
		Started: s.started, Err: s.err, RetryAt: retryAt, Attempted: Attempted(s.err)}
}

// Attempted reports whether a delivery that ended with err (a Sink's
// answer) reached the downstream: all but a pause the sink took without
// trying (a *RetryAfterError with NotAttempted). It is the one rule for
// "was this an attempt?": Event.Attempted carries it to the callbacks.
func Attempted(err error) bool {
	if err == nil {
		return true // delivered (and no error to look into, which would allocate)
	}
	var pause *RetryAfterError
	return !errors.As(err, &pause) || !pause.NotAttempted
}

// resumed applies to the head t, read at now, the failed attempts Resume
// says it had before this drainer's activation: they count toward its
// attempts, and a job out of attempts, or past its deadline, is
// dead-lettered at once. d.mu must be held.
func (d *Drainer) resumed(t *tried, failures int, history []string, now time.Time) {
	t.failures, t.retrying = failures, true
	t.due = now
	for _, line := range history { // what the attempts before met, kept by Resume
		t.note(line)
	}
	t.note(fmt.Sprintf("%s resumed after %d failed attempts", now.UTC().Format(time.RFC3339Nano), failures))
	t.deadReason = d.outOf(t, now)
}

// outOf returns the reason to dead-letter the failed job t at now: out of
// attempts (Config.FailReason) or past its deadline (ReasonDeadline); ""
// when it may be retried, or when there is no Config.DeadLetter to put it
// in. d.mu must be held.
func (d *Drainer) outOf(t *tried, now time.Time) string {
	retry := d.pace.Retry
	switch {
	case d.cfg.DeadLetter == nil:
		return ""
	case retry.Attempts > 0 && t.failures >= retry.Attempts:
		return d.cfg.FailReason
	case retry.Deadline > 0 && !now.Before(t.msg.EnqueuedAt.Add(retry.Deadline)):
		return ReasonDeadline
	}
	return ""
}

// note adds a line to t's history, keeping the last maxHistory.
func (t *tried) note(line string) {
	t.history = append(t.history, line)
	if len(t.history) > maxHistory {
		t.history = t.history[len(t.history)-maxHistory:]
	}
}

// undecodable makes k's head, just read at now and undecodable
// (queue.Msg.Undecodable), wait for its dead letter, at once and without
// an attempt: it takes no slot of the key. Without Config.DeadLetter it is
// delivered as it is (a key's token that decodes: the watch leaves the
// others unread). d.mu must be held.
func (d *Drainer) undecodable(k *keyState, now time.Time) {
	if d.cfg.DeadLetter == nil {
		return
	}
	t := &k.head
	t.deadReason, t.due = ReasonUndecodable, now
	t.note(fmt.Sprintf("%s undecodable: %s", now.UTC().Format(time.RFC3339Nano), t.msg.Undecodable))
	d.log.Warn("drain: undecodable job in the queue: dead-lettering it", "token", k.token, "seq", t.msg.Seq, "why", t.msg.Undecodable)
}
