package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/replay"
	"github.com/shaper-dev/shaper/shaper/traffic"
)

// backlogJSON is a backlog in the JSON report.
type backlogJSON struct {
	backlog
	FirstAtSeconds float64 `json:"first_at_s"`
}

// tuneReport is what shaper tune found.
type tuneReport struct {
	Trace      string
	PolicyFile string
	Policy     string
	Current    int // index of the policy as it is
	Choice     replay.Choice
	Results    []replay.Result
	Targets    replay.Targets
	// ImplicitReject says Targets.MaxReject is the policy's own rejections
	// now, set for want of --max-reject (holdRejections).
	ImplicitReject bool
	Down           replay.Downstream // when the replay's downstream failed (--down)
	Took           time.Duration
	Facts          traceFacts // what the trace recorded
}

// hasTargets reports whether any target was given: without one, nothing is
// recommended.
func (r *tuneReport) hasTargets() bool { return r.Targets != (replay.Targets{}) }

// write prints the table of candidates and the recommendation.
func (r *tuneReport) write(w io.Writer) error {
	cur := &r.Results[r.Current]
	derived := 0
	for i := range r.Results {
		if r.Results[i].Derived {
			derived++
		}
	}
	fmt.Fprintf(w, "%s: %d submissions over %s, replayed for policy %s under %d candidates in %.1fs\n",
		r.Trace, cur.Submitted, cur.Span.Round(time.Millisecond), r.Policy, len(r.Results), r.Took.Seconds())
	if n := cur.Policy.Parts(); n > 1 {
		fmt.Fprintf(w, "replayed in the policy's %d partitions, as the shapers drain it: a total cap is split into %d equal shares (total/%d each), so a candidate with few busy keys delivers less than its total\n", n, n, n)
	}
	if derived > 0 {
		fmt.Fprintf(w, "%s (marked =) not replayed: a smaller queue of the same outflow refused no job, so a larger one admits, waits and delivers the same\n", plural(derived, "candidate"))
	}
	if len(r.Down.Down) > 0 {
		windows := make([]string, len(r.Down.Down))
		for i, w := range r.Down.Down {
			windows[i] = w.String()
		}
		fmt.Fprintf(w, "the downstream fails every delivery in %s of the trace\n", strings.Join(windows, ", "))
	}
	if r.Down.Model != nil {
		fmt.Fprintf(w, "the simulated downstream %s\n", r.Down.String())
	}
	r.writeUnvaried(w, cur)
	r.writeAgreement(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	failing := len(r.Down.Down) > 0 || r.Down.Model != nil
	adapting := slices.ContainsFunc(r.Results, func(res replay.Result) bool { return res.Policy.Adapt != nil })
	head := "\toutflow\tqueue\ttotal\t"
	if adapting {
		head += "adapt\t"
	}
	head += "accepted\trejected\tdeferred\tdead\t"
	if failing {
		head += "failed\t"
	}
	head += "wait p50\twait p99\twait max\tdeepest\tpeak/s key\tpeak/s total\t"
	if r.hasTargets() {
		head += "meets\t"
	}
	fmt.Fprintln(tw, head)
	for i := range r.Results {
		res := &r.Results[i]
		mark := ""
		best := r.hasTargets() && i == r.Choice.Best
		switch {
		case best && i == r.Current:
			mark = "current, best"
		case best:
			mark = "best"
		case i == r.Current:
			mark = "current"
		}
		if res.Derived {
			mark = strings.TrimSpace(mark + " =")
		}
		total := res.Policy.Total.String()
		if total == "" {
			total = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t", mark, res.Policy.Outflow, res.Policy.Queue, total)
		if adapting {
			per := "-"
			if a := res.Policy.Adapt; a != nil {
				per = string(a.Per)
			}
			fmt.Fprintf(tw, "%s\t", per)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t", res.Accepted,
			replay.Percent(res.RejectedShare()), replay.Percent(res.DeferredShare()), res.Dead)
		if failing {
			fmt.Fprintf(tw, "%d\t", res.Failed)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t",
			short(res.Wait.P50), short(res.Wait.P99), short(res.Wait.Max),
			res.DeepestQueue, res.PeakKey, res.PeakTotal)
		if r.hasTargets() {
			meets := "no"
			if r.Targets.Meets(res) {
				meets = "yes"
			}
			fmt.Fprintf(tw, "%s\t", meets)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !r.hasTargets() {
		_, err := fmt.Fprintln(w, "no targets given (--max-wait, --max-reject, --downstream-max): nothing to recommend")
		return err
	}
	if r.Choice.Best < 0 {
		_, err := fmt.Fprintf(w, "no recommendation: %s\n", r.Choice.Reason)
		return err
	}
	if r.ImplicitReject {
		fmt.Fprintf(w, "no --max-reject given: candidates may reject no more than the policy as it is (%s); give --max-reject to trade rejections for a cheaper setting\n",
			replay.Percent(*r.Targets.MaxReject))
	}
	best := r.Results[r.Choice.Best].Policy
	fmt.Fprintf(w, "recommended: %s\n", r.Choice.Reason)
	if r.Choice.Best == r.Current {
		fmt.Fprintln(w, "the policy as it is meets the targets: nothing to change")
	}
	fmt.Fprintln(w, "policy file lines (the fields tune varies; keep the policy's others):")
	_, err := io.WriteString(w, policyYAML(best, cur.Policy))
	return err
}

// writeUnvaried says what every candidate refuses alike, which the table's
// rejected column (full keys) leaves out: the admission limit's refusals
// and the invalid submissions. A tour read "rejected 0%, meets yes" of a
// trace whose admission limit refused 77 % of it.
func (r *tuneReport) writeUnvaried(w io.Writer, cur *replay.Result) {
	var parts []string
	if cur.Limited > 0 {
		limit := ""
		if a := cur.Policy.Admit; a != nil {
			limit = " (admit: " + a.Limit.String() + ")"
		}
		parts = append(parts, fmt.Sprintf("%d (%s) by the admission limit%s", cur.Limited, replay.Percent(cur.LimitedShare()), limit))
	}
	if cur.Invalid > 0 {
		parts = append(parts, fmt.Sprintf("%d (%s) as invalid (a payload too large, a bad key)", cur.Invalid, replay.Percent(cur.InvalidShare())))
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "refused under every candidate, and not in the table's rejected column (full keys) nor in --max-reject: %s; tune varies outflow, queue, total and adapt, not these\n", strings.Join(parts, ", "))
	}
}

// policyYAML returns the policy file lines of what tune varies in p, the
// candidate chosen over the policy as it is (current): a field p drops
// (no total, no adapt) is a comment saying to remove the policy's line,
// since the lines pasted over the policy's would keep it.
func policyYAML(p, current policies.Policy) string {
	s := "  - name: " + p.Name + "\n    outflow: " + p.Outflow.String() + "\n    queue: " + strconv.Itoa(p.Queue) + "\n"
	switch {
	case !p.Total.IsZero():
		s += "    total: " + p.Total.String() + "\n"
	case !current.Total.IsZero():
		s += "    # no total: remove the policy's total line (total: " + current.Total.String() + ")\n"
	}
	if p.Adapt == nil && current.Adapt != nil {
		s += "    # no adapt: remove the policy's adapt block\n"
	}
	if a := p.Adapt; a != nil {
		s += "    adapt: {per: " + string(a.Per)
		if !a.Floor.IsZero() {
			s += ", floor: " + a.Floor.String()
		}
		if a.Latency > 0 {
			s += ", latency: " + a.Latency.String()
		}
		s += ", tolerance: " + strconv.FormatFloat(a.Tolerance, 'g', -1, 64) + "}\n"
	}
	return s
}

// short formats a duration for the table.
func short(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// candidateJSON is one candidate in the JSON report.
type candidateJSON struct {
	Outflow      policies.Rate   `json:"outflow"`
	Queue        int             `json:"queue"`
	Total        policies.Rate   `json:"total,omitzero"`
	Adapt        *policies.Adapt `json:"adapt,omitempty"`
	Submitted    uint64          `json:"submitted"`
	Accepted     uint64          `json:"accepted"`
	Rejected     uint64          `json:"rejected"`
	Deferred     uint64          `json:"deferred"`
	Limited      uint64          `json:"limited"`
	Unavailable  uint64          `json:"unavailable"`
	Invalid      uint64          `json:"invalid"`
	Readmitted   uint64          `json:"readmitted"`
	Dead         uint64          `json:"dead"`
	Delivered    uint64          `json:"delivered"`
	Failed       uint64          `json:"failed"`
	WaitP50Ms    float64         `json:"wait_p50_ms"`
	WaitP99Ms    float64         `json:"wait_p99_ms"`
	WaitMaxMs    float64         `json:"wait_max_ms"`
	DeepestQueue int64           `json:"deepest_queue"`
	PeakKey      int             `json:"peak_per_s_key"`
	PeakTotal    int             `json:"peak_per_s_total"`
	Recorded     uint64          `json:"recorded,omitempty"`
	Agreed       uint64          `json:"agreed,omitempty"`
	Meets        *bool           `json:"meets,omitempty"`
}

func (r *tuneReport) writeJSON(w io.Writer) error {
	out := struct {
		Trace       string  `json:"trace"`
		Policy      string  `json:"policy"`
		SpanSeconds float64 `json:"span_s"`
		TookSeconds float64 `json:"took_s"`
		Current     int     `json:"current"`
		Recommended *int    `json:"recommended"`
		Binding     string  `json:"binding,omitempty"`
		Reason      string  `json:"reason,omitempty"`
		// MaxRejectHeld is the bound on rejections set for want of
		// --max-reject: the policy's own share now (holdRejections).
		MaxRejectHeld *float64 `json:"max_reject_held,omitempty"`
		YAML          string   `json:"yaml,omitempty"`
		// What the trace recorded (a trace of shaper record): its outcomes,
		// how far apart the replay's counts are (a share of the
		// submissions), and a backlog it starts with.
		RecordedOutcomes map[string]uint64 `json:"recorded_outcomes,omitempty"`
		CountsApart      *float64          `json:"counts_apart,omitempty"`
		Backlog          *backlogJSON      `json:"backlog,omitempty"`
		Candidates       []candidateJSON   `json:"candidates"`
	}{Trace: r.Trace, Policy: r.Policy, Current: r.Current, TookSeconds: r.Took.Seconds(),
		SpanSeconds: r.Results[r.Current].Span.Seconds(), Binding: r.Choice.Binding, Reason: r.Choice.Reason}
	for o, n := range r.Facts.Recorded {
		if o != traffic.Unknown {
			if out.RecordedOutcomes == nil {
				out.RecordedOutcomes = make(map[string]uint64)
			}
			out.RecordedOutcomes[o.String()] = n
		}
	}
	if _, gap, ok := r.outcomeCounts(); ok {
		out.CountsApart = &gap
	}
	if b := r.Facts.Backlog; b.Keys > 0 {
		out.Backlog = &backlogJSON{b, b.FirstAt.Seconds()}
	}
	if r.ImplicitReject {
		out.MaxRejectHeld = r.Targets.MaxReject
	}
	if r.hasTargets() && r.Choice.Best >= 0 {
		out.Recommended = &r.Choice.Best
		out.YAML = policyYAML(r.Results[r.Choice.Best].Policy, r.Results[r.Current].Policy)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for i := range r.Results {
		res := &r.Results[i]
		c := candidateJSON{
			Outflow: res.Policy.Outflow, Queue: res.Policy.Queue, Total: res.Policy.Total, Adapt: res.Policy.Adapt,
			Submitted: res.Submitted, Accepted: res.Accepted, Rejected: res.Rejected, Deferred: res.Deferred,
			Limited: res.Limited, Unavailable: res.Unavailable, Invalid: res.Invalid,
			Readmitted: res.Readmitted, Dead: res.Dead, Delivered: res.Delivered, Failed: res.Failed,
			WaitP50Ms: ms(res.Wait.P50), WaitP99Ms: ms(res.Wait.P99), WaitMaxMs: ms(res.Wait.Max),
			DeepestQueue: res.DeepestQueue, PeakKey: res.PeakKey, PeakTotal: res.PeakTotal,
			Recorded: res.Recorded, Agreed: res.Agreed,
		}
		if r.hasTargets() {
			meets := r.Targets.Meets(res)
			c.Meets = &meets
		}
		out.Candidates = append(out.Candidates, c)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
