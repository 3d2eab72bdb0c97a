package queue

import (
	"strconv"
	"strings"
	"time"
)

// JobID returns the id of a job Admit stored at seq without an id of its
// own: the stream's creation time and the sequence, both in base 36 and
// joined by '-' (a character neither nuid nor hex ids contain). The creation
// time keeps ids unique when a stream is deleted and created again.
func (q *Queue) JobID(seq uint64) string { return JobID(*q.epoch.Load(), seq) }

// Epoch returns the epoch of the queue's stream (EpochOf its creation
// time), the first part of the ids JobID makes, as last read.
func (q *Queue) Epoch() string { return *q.epoch.Load() }

func (q *Queue) setEpoch(created time.Time) {
	e := EpochOf(created)
	q.epoch.Store(&e)
}

// JobID is Queue.JobID for a stream of the given epoch (EpochOf its
// creation time), for readers of a queue's stream that have no Queue.
func JobID(epoch string, seq uint64) string {
	return epoch + "-" + strconv.FormatUint(seq, 36)
}

// EpochOf returns the epoch part of the ids of a stream created at created.
func EpochOf(created time.Time) string { return strconv.FormatInt(created.UnixNano(), 36) }

// ParseJobID splits an id JobID made into the creation time of its stream
// (Unix nanoseconds: a later stream has a larger epoch) and its sequence.
// ok is false for any other id, such as a deferred job's own.
func ParseJobID(id string) (epoch int64, seq uint64, ok bool) {
	e, s, found := strings.Cut(id, "-")
	if !found {
		return 0, 0, false
	}
	epoch, err := strconv.ParseInt(e, 36, 64)
	if err != nil || epoch <= 0 || strconv.FormatInt(epoch, 36) != e {
		return 0, 0, false
	}
	if seq, ok = parseSeq(s); !ok {
		return 0, 0, false
	}
	return epoch, seq, true
}

// parseSeq parses the sequence part of an id JobID made: a positive number
// in base 36, written as FormatUint writes it.
func parseSeq(s string) (uint64, bool) {
	seq, err := strconv.ParseUint(s, 36, 64)
	if err != nil || seq == 0 || strconv.FormatUint(seq, 36) != s {
		return 0, false
	}
	return seq, true
}

// MaxJobIDLen bounds the ids ValidJobID accepts. The shaper's ids are at
// most 27 bytes: 22 for a nuid, 25 for an Idempotency-Key's hash, 27 for an
// id JobID makes.
const MaxJobIDLen = 64

// ValidJobID reports whether id could be a job id the shaper made: 1 to
// MaxJobIDLen bytes of [A-Za-z0-9_-], the characters of a plain key. An id
// from outside (GET /v1/jobs/{id}) must pass it before it is used in a
// subject: a few KiB past the server's control line limit, and the server
// closes the connection.
func ValidJobID(id string) bool { return id != "" && len(id) <= MaxJobIDLen && plain(id) }

// SeqOf returns the sequence of the job an id made by JobID names, and
// false when id is not such an id of this queue.
func (q *Queue) SeqOf(id string) (uint64, bool) {
	rest, ok := strings.CutPrefix(id, *q.epoch.Load()+"-")
	if !ok {
		return 0, false
	}
	return parseSeq(rest)
}
