package client

import "time"

// Job is what GET /v1/jobs/{id} says about a job. A queued job is found in
// its queue, with Updated its enqueue time; a delivered job that needed no
// record is known by its absence from its queue, and has neither Key nor
// Updated. Records of what cannot be derived (deferrals, failed attempts,
// dead letters) are kept 24 h after their last change, at most 100,000 of
// them by default; past that horizon a job is not found.
type Job struct {
	ID     string    `json:"id"`
	Policy string    `json:"policy"`
	Key    string    `json:"key,omitempty"`
	Status JobStatus `json:"status"`
	// Deferrals counts the failed re-admissions of a deferred job.
	Deferrals int `json:"deferrals,omitempty"`
	// Attempts counts the delivery attempts made.
	Attempts int `json:"delivery_attempts,omitempty"`
	// Pauses counts, of the attempts, those the downstream answered by
	// asking for a pause; Paused says the last one did: the key waits
	// until NextTry.
	Pauses int  `json:"pauses,omitempty"`
	Paused bool `json:"paused,omitempty"`
	// NextTry is when a deferred or failing job is tried again.
	NextTry time.Time `json:"next_try,omitzero"`
	// DeliveringSince, of a queued job, is when its delivery started: it
	// awaits the consumer's answer, attempt DeliveringAttempt (0 when not
	// known: a key whose deliveries fly apart, concurrency.key above 1).
	DeliveringSince   time.Time `json:"delivering_since,omitzero"`
	DeliveringAttempt int       `json:"delivering_attempt,omitempty"`
	// Reason is why a dead (or replayed) job died: attempts, deadline,
	// delivery or undecodable; of a queued job, why its jobs wait beyond
	// their turn (waiting for a consumer since …); of a deferred job past
	// its NextTry, why it is still deferred.
	Reason string `json:"reason,omitempty"`
	// LastError is the last failure.
	LastError string `json:"last_error,omitempty"`
	// ReplayedAs is, of a replayed dead letter (JobReplayed), the id of the
	// new job it was submitted again as: its status is that job's.
	ReplayedAs string `json:"replayed_as,omitempty"`
	// DuplicateOf is, of a JobDuplicate, the id of the job it is: a retry
	// of a submission stored under its Idempotency-Key, deferred while
	// other deferred jobs of its key waited, and found to be that job when
	// it was re-admitted. Its status is that job's.
	DuplicateOf string `json:"duplicate_of,omitempty"`
	// History lists what happened to the job, one line each.
	History []string `json:"history,omitempty"`
	// Updated is when the record last changed; zero when not known.
	Updated time.Time `json:"updated,omitzero"`
}
