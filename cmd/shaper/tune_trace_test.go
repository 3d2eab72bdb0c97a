package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper/traffic"
)

// writeTrace writes recs as a trace file and returns its path.
func writeTrace(t *testing.T, recs []traffic.Record) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trace.csv")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := traffic.NewWriter(f)
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return path
}

// A key found full before the trace had given it a queue's worth of jobs
// held jobs from before the trace; a key that filled within it did not.
func TestTraceBacklog(t *testing.T) {
	const (
		A = traffic.Accepted
		R = traffic.Rejected
		D = traffic.Deferred
	)
	row := func(ms int, key string, o traffic.Outcome) traffic.Record {
		return traffic.Record{At: time.Duration(ms) * time.Millisecond, Key: key, Size: 1, Outcome: o}
	}
	for _, c := range []struct {
		name string
		recs []traffic.Record
		want backlog
	}{
		{"filled within the trace", []traffic.Record{row(0, "a", A), row(1, "a", A), row(2, "a", A), row(3, "a", R), row(4, "b", A)}, backlog{}},
		{"full from the start", []traffic.Record{row(5, "a", R), row(6, "b", A), row(7, "b", D), row(8, "a", A), row(9, "a", R), row(10, "c", A)},
			backlog{Keys: 2, Jobs: 3 + 2, FirstKey: "a", FirstAt: 5 * time.Millisecond, FirstKept: 0}},
		{"only the first refusal counts", []traffic.Record{row(0, "a", A), row(1, "a", A), row(2, "a", A), row(3, "a", R), row(4, "a", R)}, backlog{}},
	} {
		path := writeTrace(t, c.recs)
		facts, err := readTraceFacts(path, 3)
		if err != nil {
			t.Fatal(err)
		}
		if facts.Backlog != c.want {
			t.Errorf("%s: backlog %+v, want %+v", c.name, facts.Backlog, c.want)
		}
		if n := facts.Recorded[traffic.Accepted]; int(n) != strings.Count(strings.Join(outcomes(c.recs), ","), "accepted") {
			t.Errorf("%s: %d accepted counted", c.name, n)
		}
	}
}

func outcomes(recs []traffic.Record) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Outcome.String())
	}
	return out
}

// tune explains its figure of agreement with the recorded outcomes: what
// it compares, whether it is good enough, and what to check when it is
// not; and it warns of a trace that starts mid-backlog.
func TestTuneExplainsAgreement(t *testing.T) {
	pf := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(pf, []byte("policies:\n  - name: orders\n    outflow: 1/s\n    queue: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// One job every 10 s: a queue of 2 never fills.
	var recs []traffic.Record
	for i := range 10 {
		recs = append(recs, traffic.Record{At: time.Duration(i) * 10 * time.Second, Key: "k", Size: 10, Outcome: traffic.Accepted})
	}
	out, _, err := runCLI(t, "tune", "--policy-file", pf, "--trace", writeTrace(t, recs), "--outflow", "1/s", "--queue", "2")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"recorded outcomes: the replay of the current policy decides 100% of the 10 recorded submissions as the shaper did; " +
			"its counts are 0% of the submissions apart (recorded / replayed: accepted 10 / 10)\n",
		"  good: within 2%, the replay reproduces this shaper: trust the table\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tune of a trace it reproduces lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "warning") {
		t.Errorf("tune warns of a trace that starts with empty queues:\n%s", out)
	}

	// The shaper refused the first two: its queue held two jobs from before.
	recs[0].Outcome, recs[1].Outcome = traffic.Rejected, traffic.Rejected
	trace := writeTrace(t, recs)
	out, _, err = runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--outflow", "1/s", "--queue", "2")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"decides 80% of the 10 recorded submissions as the shaper did; its counts are 20% of the submissions apart (recorded / replayed: accepted 8 / 10, rejected 2 / 0)\n",
		"  low: more than 2% apart, the table may not predict this shaper. The shaper refused more: its queues were fuller. The trace may start mid-backlog",
		"--down FROM-TO", "a live override: * in shaper status",
		"warning: the trace starts mid-backlog: 1 key was full before the trace had given it the 2 jobs its queue holds (at 0, after 0), " +
			"so at least 2 jobs were queued when the recording began (or the shaper's queue was smaller than " + pf + " says).",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tune of a trace that starts mid-backlog lacks %q:\n%s", want, out)
		}
	}
	out, _, err = runCLI(t, "tune", "--policy-file", pf, "--trace", trace, "--outflow", "1/s", "--queue", "2", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Recorded map[string]int `json:"recorded_outcomes"`
		Apart    *float64       `json:"counts_apart"`
		Backlog  *struct {
			Keys        int     `json:"keys"`
			JobsAtLeast int     `json:"jobs_at_least"`
			FirstKey    string  `json:"first_key"`
			FirstAt     float64 `json:"first_at_s"`
		} `json:"backlog"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Recorded["rejected"] != 2 || rep.Apart == nil || *rep.Apart != 0.2 || rep.Backlog == nil || rep.Backlog.Keys != 1 || rep.Backlog.JobsAtLeast != 2 || rep.Backlog.FirstKey != "k" {
		t.Errorf("tune --json: recorded %v, apart %v, backlog %+v; want 2 rejected, 0.2 apart, a backlog of 2 jobs of k", rep.Recorded, rep.Apart, rep.Backlog)
	}
}
