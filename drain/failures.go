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
	// The deadline bounds retries and re-admissions: not a job never
	// attempted that waits for a consumer to come online (a pause without
	// an attempt), which is neither.
	retried := t.retrying || d.cfg.CountPauses
	if end, ok := d.deadlineOf(t); ok && retried && t.deadReason == "" {
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
		k.pauseUntil(t.due) // the downstream asked the key to wait
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
		Started: s.started, Err: s.err, RetryAt: retryAt, Attempted: Attempted(s.err), Failures: t.failures, Paused: t.paused}
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

// Resumed is what Config.Resume knows of a job's delivery attempts before
// this drainer's activation (by another drainer, or before a restart).
// The zero value: none.
type Resumed struct {
	Attempts int      // attempts made, failed or paused: the next is Attempts+1
	Failures int      // of them, those that count toward Pace.Retry.Attempts
	History  []string // what they met (Event.History)
	// RetryAt is when the job may be tried again (Event.RetryAt): the end
	// of its backoff, or with Paused, of the pause the downstream asked
	// the key for. Zero: at once.
	RetryAt time.Time
	Paused  bool
}

// resumed applies to k's head t, read at now, the attempts Resume says it
// had before this drainer's activation: its failures count toward its
// attempts, its backoff or the downstream's pause runs on to its end (a
// restart does not fire every failed job at once, nor lift a pause), and
// a job out of attempts, or past its deadline, is dead-lettered at once.
// d.mu must be held.
func (d *Drainer) resumed(k *keyState, t *tried, r Resumed, now time.Time) {
	t.failures, t.retrying = r.Failures, true
	t.due = maxTime(now, r.RetryAt)
	if end, ok := d.deadlineOf(t); ok {
		t.due = minTime(t.due, maxTime(now, end)) // look again when the deadline passes
	}
	t.paused = r.Paused && t.due.After(now)
	if t.paused {
		k.pauseUntil(t.due)
	}
	for _, line := range r.History { // what the attempts before met, kept by Resume
		t.note(line)
	}
	line := fmt.Sprintf("%s resumed after %d failed attempts", now.UTC().Format(time.RFC3339Nano), r.Failures)
	if pauses := r.Attempts - r.Failures; pauses > 0 {
		line += fmt.Sprintf(" and %d paused", pauses)
	}
	if t.due.After(now) {
		line += ", next try " + t.due.UTC().Format(time.RFC3339Nano)
	}
	t.note(line)
	t.deadReason = d.outOf(t, now)
	if t.deadReason != "" {
		t.due = now
	}
}

// deadlineOf returns when t's retry.deadline passes, and false when it has
// none, or when there is no Config.DeadLetter to put it in. d.mu must be
// held.
func (d *Drainer) deadlineOf(t *tried) (time.Time, bool) {
	if dl := d.pace.Retry.Deadline; dl > 0 && d.cfg.DeadLetter != nil {
		return t.msg.EnqueuedAt.Add(dl), true
	}
	return time.Time{}, false
}

// pauseUntil makes k wait until at, the end of a pause its downstream
// asked for: no attempt of any of its jobs before.
func (k *keyState) pauseUntil(at time.Time) {
	k.next = instantOf(maxTime(k.next.time(), at))
	k.paused = instantOf(maxTime(k.paused.time(), at))
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
	}
	if end, ok := d.deadlineOf(t); ok && !now.Before(end) {
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
