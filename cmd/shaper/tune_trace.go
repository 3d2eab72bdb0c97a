package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/shaper-dev/shaper/shaper/replay"
	"github.com/shaper-dev/shaper/shaper/traffic"
)

// traceFacts is what tune reads in a trace besides its replays: the
// outcomes the shaper recorded, and whether its queues held jobs when the
// recording began.
type traceFacts struct {
	// Recorded counts the recorded outcomes (Unknown: rows without one).
	Recorded map[traffic.Outcome]uint64
	// Backlog is the evidence that the trace starts mid-backlog.
	Backlog backlog
	// First and Last are the first and last submissions' times.
	First, Last time.Duration
}

// unitsNote says when the trace's times look written in another unit
// than seconds since its start (a tour's trace in milliseconds replayed as
// 166 hours, and Unix times as 472,222 hours: every candidate then met any
// target, and the cheapest was recommended); "" when they look right.
func (f *traceFacts) unitsNote() string {
	const unixEra = 1e8 * time.Second // 1973 as a Unix time; 3 years into a trace
	n := f.submissions()
	span := f.Last - f.First
	switch {
	case f.First >= unixEra:
		return fmt.Sprintf("note: the trace's first submission is at %.0f s: `at` is seconds since the trace's start, not a Unix time; subtract the first time from each", f.First.Seconds())
	case span > 24*time.Hour && float64(n)/span.Seconds() < 1.0/60:
		return fmt.Sprintf("note: the trace spans %s for %d submissions (%.2g a second): `at` is in seconds; a trace written in milliseconds is 1000 times too long", span.Round(time.Second), n, float64(n)/span.Seconds())
	}
	return ""
}

// backlog is what a trace shows of jobs queued before it began. The trace
// records only submissions, but a queue can only be full of jobs it was
// given: a key the shaper refused as full (rejected, or deferred) before
// the trace had accepted as many of its jobs as its queue holds had jobs
// from before the trace (queued, or deferred ahead of it), at least the
// difference, however fast it drained. Or the shaper ran a smaller queue
// than the policy file says.
type backlog struct {
	// Keys counts the keys found full too early; Jobs adds up, over them,
	// the jobs they held at least from before the trace.
	Keys int   `json:"keys"`
	Jobs int64 `json:"jobs_at_least"`
	// The first such refusal: its key, its time in the trace, and the jobs
	// of its key the trace had accepted by then.
	FirstKey  string        `json:"first_key"`
	FirstAt   time.Duration `json:"-"`
	FirstKept int           `json:"first_accepted"`
}

// readTraceFacts reads the trace at path for a policy of the given queue
// size. A trace that does not read is an error naming path and the line.
func readTraceFacts(path string, queue int) (traceFacts, error) {
	f, err := os.Open(path)
	if err != nil {
		return traceFacts{}, err
	}
	defer f.Close()
	facts, err := traceFactsOf(traffic.NewReader(f), queue)
	if err != nil {
		return facts, fmt.Errorf("%s: %s", path, strings.TrimPrefix(err.Error(), "traffic: "))
	}
	return facts, nil
}

// submissions is how many submissions the trace holds.
func (f *traceFacts) submissions() (n uint64) {
	for _, c := range f.Recorded {
		n += c
	}
	return n
}

func traceFactsOf(r *traffic.Reader, queue int) (traceFacts, error) {
	facts := traceFacts{Recorded: make(map[traffic.Outcome]uint64)}
	kept := make(map[string]int) // the jobs of each key the trace accepted; -1 once found full
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			return facts, nil
		}
		if err != nil {
			return facts, err
		}
		if facts.submissions() == 0 {
			facts.First = rec.At
		}
		facts.Last = rec.At
		facts.Recorded[rec.Outcome]++
		n := kept[rec.Key]
		switch {
		case n < 0:
		case rec.Outcome == traffic.Rejected || rec.Outcome == traffic.Deferred:
			if n < queue {
				b := &facts.Backlog
				if b.Keys == 0 {
					b.FirstKey, b.FirstAt, b.FirstKept = rec.Key, rec.At, n
				}
				b.Keys++
				b.Jobs += int64(queue - n)
			}
			kept[rec.Key] = -1 // its first refusal says it all
		case rec.Outcome == traffic.Accepted:
			kept[rec.Key] = n + 1
		}
	}
}

// warning says what the backlog means for the replay, "" when the trace
// shows none.
func (b *backlog) warning(policyFile string, queue int) string {
	if b.Keys == 0 {
		return ""
	}
	full := fmt.Sprintf("1 key was full before the trace had given it the %d jobs its queue holds (at %s, after %d)",
		queue, short(b.FirstAt), b.FirstKept)
	if b.Keys > 1 {
		full = fmt.Sprintf("%d keys were full before the trace had given them the %d jobs their queue holds (the first, %q, at %s, after %d)",
			b.Keys, queue, printable(b.FirstKey), short(b.FirstAt), b.FirstKept)
	}
	return fmt.Sprintf("warning: the trace starts mid-backlog: %s, so at least %d jobs were queued when the recording began "+
		"(or the shaper's queue was smaller than %s says). The replay starts with empty queues: until that backlog would have drained, "+
		"it accepts more and waits less than the shaper did. Record again from a quiet moment (shaper status: QUEUED near 0).",
		full, b.Jobs, policyFile)
}

// goodGap is how far apart the replay's outcome counts and the recorded
// ones may be for the table to be trusted: the tolerance the replay meets
// against live shapers (integration's TestTuneFidelity).
const goodGap = 0.02

// outcomeCount is one outcome as recorded and as the replay of the
// current policy decided it.
type outcomeCount struct {
	outcome            traffic.Outcome
	recorded, replayed uint64
}

// outcomeCounts returns the outcomes that the trace recorded or the replay
// decided, and how far apart their counts are: the share of the
// submissions whose outcome would have to change to make them equal. ok
// is false when some rows record no outcome.
func (r *tuneReport) outcomeCounts() (counts []outcomeCount, gap float64, ok bool) {
	cur := &r.Results[r.Current]
	if cur.Recorded == 0 || cur.Recorded != cur.Submitted {
		return nil, 0, false
	}
	replayed := map[traffic.Outcome]uint64{traffic.Accepted: cur.Accepted, traffic.Rejected: cur.Rejected, traffic.Deferred: cur.Deferred,
		traffic.Limited: cur.Limited, traffic.Unavailable: cur.Unavailable, traffic.Invalid: cur.Invalid}
	var apart uint64
	for _, o := range traffic.Outcomes()[1:] {
		c := outcomeCount{o, r.Facts.Recorded[o], replayed[o]}
		if c.recorded == 0 && c.replayed == 0 {
			continue
		}
		counts = append(counts, c)
		apart += max(c.recorded, c.replayed) - min(c.recorded, c.replayed)
	}
	return counts, float64(apart) / 2 / float64(cur.Recorded), true
}

// writeAgreement says how the replay of the current policy compares with
// what the shaper recorded, what that means and, when they are far apart,
// what to look at; and whether the trace starts mid-backlog. Nothing for a
// trace that recorded no outcome (a made-up one).
func (r *tuneReport) writeAgreement(w io.Writer) {
	cur := &r.Results[r.Current]
	if cur.Recorded == 0 {
		return
	}
	fmt.Fprintf(w, "recorded outcomes: the replay of the current policy decides %s of the %d recorded submissions as the shaper did",
		replay.Percent(float64(cur.Agreed)/float64(cur.Recorded)), cur.Recorded)
	counts, gap, ok := r.outcomeCounts()
	if !ok {
		fmt.Fprintf(w, " (%d rows record no outcome: the counts are not compared)\n", cur.Submitted-cur.Recorded)
	} else {
		fmt.Fprintf(w, "; its counts are %s of the submissions apart (recorded / replayed:", replay.Percent(gap))
		for i, c := range counts {
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(w, "%s %s %d / %d", sep, c.outcome, c.recorded, c.replayed)
		}
		fmt.Fprintln(w, ")")
		fmt.Fprintln(w, "  "+r.verdict(counts, gap, float64(cur.Agreed)/float64(cur.Recorded)))
	}
	if warn := r.Facts.Backlog.warning(r.PolicyFile, cur.Policy.Queue); warn != "" {
		fmt.Fprintln(w, warn)
	}
}

// verdict says whether the counts are close enough to trust the table and,
// when they are not, what may have made the shaper decide otherwise.
func (r *tuneReport) verdict(counts []outcomeCount, gap, agreed float64) string {
	if gap <= goodGap {
		s := fmt.Sprintf("good: within %s, the replay reproduces this shaper: trust the table", replay.Percent(goodGap))
		if agreed < 0.95 {
			s += "; single decisions differ where jobs race for the slot the drain frees next, which no replay times to the millisecond"
		}
		return s
	}
	var refusedRec, refusedRep, unavailable uint64
	for _, c := range counts {
		switch c.outcome {
		case traffic.Rejected, traffic.Deferred:
			refusedRec += c.recorded
			refusedRep += c.replayed
		case traffic.Unavailable:
			unavailable = c.recorded
		}
	}
	s := fmt.Sprintf("low: more than %s apart, the table may not predict this shaper. ", replay.Percent(goodGap))
	live := fmt.Sprintf("than %s says for policy %s (a live override: * in shaper status; give the live values with --outflow and --queue)", r.PolicyFile, r.Policy)
	switch {
	case refusedRec > refusedRep:
		s += "The shaper refused more: its queues were fuller. The trace may start mid-backlog (record from a quiet moment), " +
			"its downstream may have failed or slowed while recording (replay that with --down FROM-TO), or it ran a smaller queue or a lower outflow " + live
	case refusedRec < refusedRep:
		s += "The shaper refused fewer: it ran a larger queue or a higher outflow " + live + ", or rows were lost while recording (shaper record says how many)"
	default:
		s += "Check that the shaper ran the policy as the file says, and its admission limit"
	}
	if unavailable > 0 {
		s += fmt.Sprintf("; %d submissions were answered unavailable: a backend failed while recording, which a replay does not", unavailable)
	}
	return s
}
