package client

import (
	"fmt"
	"strconv"
)

// ReplyStatus is the status of a NATS submission's Reply. It travels as
// its name; the zero value is no status and does not marshal.
type ReplyStatus uint8

// The statuses of a Reply.
const (
	ReplyQueued   ReplyStatus = iota + 1 // stored in its key's queue (202)
	ReplyRejected                        // refused: the key is full, or the admission limit says no (429)
	ReplyDeferred                        // kept for later: the key is full and the policy defers (429 deferred)
	ReplyError                           // not taken, with Code and Error saying why (4xx, 5xx)
)

var replyStatusNames = [...]string{ReplyQueued: "queued", ReplyRejected: "rejected", ReplyDeferred: "deferred", ReplyError: "error"}

// String returns the status's name on the wire, or a description of an
// unknown value.
func (s ReplyStatus) String() string {
	if s > 0 && int(s) < len(replyStatusNames) {
		return replyStatusNames[s]
	}
	return "ReplyStatus(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (s ReplyStatus) MarshalText() ([]byte, error) {
	if s > 0 && int(s) < len(replyStatusNames) {
		return []byte(replyStatusNames[s]), nil
	}
	return nil, fmt.Errorf("client: reply status %d has no name", uint8(s))
}

// UnmarshalText implements encoding.TextUnmarshaler; it refuses a name the
// contract does not have.
func (s *ReplyStatus) UnmarshalText(b []byte) error {
	for v, name := range replyStatusNames {
		if v > 0 && name == string(b) {
			*s = ReplyStatus(v)
			return nil
		}
	}
	return fmt.Errorf("client: unknown reply status %q", b)
}

// JobStatus is the status of a Job. It travels as its name; the zero value
// is no status and does not marshal.
type JobStatus uint8

// The statuses of a Job.
const (
	JobQueued    JobStatus = iota + 1 // in its key's queue
	JobDeferred                       // kept in the deferred stream, waiting for room in its key
	JobDelivered                      // delivered (its sink accepted it)
	JobDead                           // dead-lettered, with Reason and History
	JobReplayed                       // a dead letter replayed: submitted again as the job Job.ReplayedAs
	JobDuplicate                      // a deferred retry found to be the job Job.DuplicateOf, stored before
)

var jobStatusNames = [...]string{JobQueued: "queued", JobDeferred: "deferred", JobDelivered: "delivered", JobDead: "dead", JobReplayed: "replayed", JobDuplicate: "duplicate"}

// String returns the status's name on the wire, or a description of an
// unknown value.
func (s JobStatus) String() string {
	if s > 0 && int(s) < len(jobStatusNames) {
		return jobStatusNames[s]
	}
	return "JobStatus(" + strconv.Itoa(int(s)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (s JobStatus) MarshalText() ([]byte, error) {
	if s > 0 && int(s) < len(jobStatusNames) {
		return []byte(jobStatusNames[s]), nil
	}
	return nil, fmt.Errorf("client: job status %d has no name", uint8(s))
}

// UnmarshalText implements encoding.TextUnmarshaler; it refuses a name the
// contract does not have.
func (s *JobStatus) UnmarshalText(b []byte) error {
	for v, name := range jobStatusNames {
		if v > 0 && name == string(b) {
			*s = JobStatus(v)
			return nil
		}
	}
	return fmt.Errorf("client: unknown job status %q", b)
}
