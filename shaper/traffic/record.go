package traffic

import (
	"fmt"
	"strconv"
	"time"
)

// Record is one submission of a trace.
type Record struct {
	// At is when the job was submitted, since the start of the trace. A
	// trace keeps it to the microsecond.
	At time.Duration
	// Key is the job's key.
	Key string
	// Size is the payload's size in bytes.
	Size int
	// Outcome is what the shaper answered; Unknown in a made-up trace.
	Outcome Outcome
}

// Outcome is what a shaper answered to a submission.
type Outcome uint8

// The outcomes a trace records.
const (
	Unknown     Outcome = iota // not recorded: an empty column
	Accepted                   // 202: stored in its key's queue
	Rejected                   // 429: the key's queue was full, the job not kept
	Deferred                   // 429: the key's queue was full, the job kept for later
	Limited                    // 429: the admission limit refused it
	Unavailable                // 503: a backend failed
	Invalid                    // 4xx: a bad key or an oversized payload
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"", "accepted", "rejected", "deferred", "limited", "unavailable", "invalid"}

// Outcomes lists every outcome a trace can record, Unknown first.
func Outcomes() []Outcome {
	out := make([]Outcome, numOutcomes)
	for i := range out {
		out[i] = Outcome(i)
	}
	return out
}

// String returns the outcome's name in a trace ("" for Unknown).
func (o Outcome) String() string {
	if o < numOutcomes {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// MarshalText implements encoding.TextMarshaler.
func (o Outcome) MarshalText() ([]byte, error) {
	if o >= numOutcomes {
		return nil, fmt.Errorf("traffic: unknown outcome %d", o)
	}
	return []byte(outcomeNames[o]), nil
}

// UnmarshalText implements encoding.TextUnmarshaler: one of the names of
// the format, or "" for Unknown.
func (o *Outcome) UnmarshalText(b []byte) error {
	for i, name := range outcomeNames {
		if string(b) == name {
			*o = Outcome(i)
			return nil
		}
	}
	return fmt.Errorf("traffic: unknown outcome %q (want accepted, rejected, deferred, limited, unavailable, invalid or nothing)", b)
}

// MaxKeyLen is the longest key a trace holds, in bytes (the shaper's own
// limit).
const MaxKeyLen = 256

// header is the header row of the format.
var header = [...]string{"at", "key", "size", "outcome"}
