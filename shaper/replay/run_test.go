package replay_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/replay"
	"github.com/shaper-dev/shaper/shaper/traffic"
)

func run(t *testing.T, yaml string, recs []traffic.Record) replay.Result {
	t.Helper()
	res, err := replay.Run(context.Background(), policy(t, yaml), traceOf(t, recs), replay.Config{Series: true})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func at(ms int, key string) traffic.Record {
	return traffic.Record{At: time.Duration(ms) * time.Millisecond, Key: key, Size: 10}
}

// One key at 1/s with a queue of 2: a burst of five finds two places; a
// delivered job keeps its place until its slot ends, so at 1.5 s one is
// free again.
func TestRunReject(t *testing.T) {
	res := run(t, "  - {name: p, outflow: 1/s, queue: 2}\n",
		[]traffic.Record{at(0, "a"), at(0, "a"), at(0, "a"), at(0, "a"), at(0, "a"), at(1500, "a")})
	want := replay.Result{Submitted: 6, Accepted: 3, Rejected: 3, Delivered: 3, DeepestQueue: 2, PeakKey: 2, PeakTotal: 2,
		Wait: replay.Wait{P50: 500 * time.Millisecond, P99: time.Second, Max: time.Second}, Span: 1500 * time.Millisecond}
	check(t, res, want)
	if got := res.RejectedShare(); got != 0.5 {
		t.Errorf("RejectedShare() = %v, want 0.5", got)
	}
	if res.Series == nil || len(res.Series.Points) == 0 {
		t.Fatalf("no series, though Config.Series asked for one")
	}
	var delivered uint64
	for _, pt := range res.Series.Points {
		delivered += pt.Deliveries
	}
	if delivered != 3 || res.Series.Points[0].Deliveries != 1 || res.Series.Points[0].Queued != 0 {
		t.Errorf("series: %d deliveries, first point %+v; want 3, the first delivered at 0 before anything was queued", delivered, res.Series.Points[0])
	}
}

// A defer policy keeps what its full queue refuses, re-admits it as the
// key drains, and counts the wait from the submission; past the deadline
// deferred jobs are dead-lettered.
func TestRunDefer(t *testing.T) {
	res := run(t, "  - {name: p, outflow: 1/s, queue: 1, overflow: defer}\n",
		[]traffic.Record{at(0, "a"), at(0, "a"), at(0, "a")})
	check(t, res, replay.Result{Submitted: 3, Accepted: 1, Deferred: 2, Readmitted: 2, Delivered: 3, DeepestQueue: 1, PeakKey: 2, PeakTotal: 2,
		Wait: replay.Wait{P50: time.Second, P99: 2 * time.Second, Max: 2 * time.Second}})

	// At 1/m a delivered job keeps its place for a second only: the
	// second job goes back into the queue then, and waits its minute; the
	// third finds the key full until past its deadline.
	res = run(t, "  - {name: p, outflow: 1/m, queue: 1, overflow: defer, retry: {deadline: 10s}}\n",
		[]traffic.Record{at(0, "a"), at(0, "a"), at(0, "a")})
	check(t, res, replay.Result{Submitted: 3, Accepted: 1, Deferred: 2, Readmitted: 1, Dead: 1, Delivered: 2, DeepestQueue: 1, PeakKey: 1, PeakTotal: 1,
		Wait: replay.Wait{P50: 0, P99: time.Minute, Max: time.Minute}})
}

// A total cap shares its rate over the keys: the downstream never sees
// more than it allows (one more in any second, the drain's bound).
func TestRunTotal(t *testing.T) {
	var recs []traffic.Record
	for i := range 50 {
		recs = append(recs, at(0, string(rune('a'+i%10))))
	}
	res := run(t, "  - {name: p, outflow: 10/s, queue: 100, total: 5/s}\n", recs)
	if res.Accepted != 50 || res.Delivered != 50 || res.PeakTotal > 6 || res.PeakKey > 2 {
		t.Errorf("50 jobs over 10 keys at a total of 5/s: %+v; want all delivered, at most 6 in a second, 2 per key", res)
	}
	if res.Wait.Max < 9*time.Second || res.Wait.Max > 10*time.Second {
		t.Errorf("the last of 50 jobs at 5/s waited %v, want about 10 s", res.Wait.Max)
	}
}

// A trace's recorded outcomes are compared with the replay's.
func TestRunAgreement(t *testing.T) {
	recs := []traffic.Record{at(0, "a"), at(0, "a"), at(0, "a")}
	recs[0].Outcome, recs[1].Outcome, recs[2].Outcome = traffic.Accepted, traffic.Rejected, traffic.Rejected
	res := run(t, "  - {name: p, outflow: 1/s, queue: 2}\n", recs)
	if res.Recorded != 3 || res.Agreed != 2 {
		t.Errorf("Recorded, Agreed = %d, %d; want 3, 2 (the second job fits in a queue of 2)", res.Recorded, res.Agreed)
	}
}

// A replay is deterministic, and a heavier load waits longer.
func TestRunDeterministic(t *testing.T) {
	src := synthetic(t, traffic.Synth{Duration: 30 * time.Second, Rate: 200, Keys: 50, Zipf: 1.2, Seed: 7,
		Burst: traffic.Burst{Every: 10 * time.Second, For: 2 * time.Second, Rate: 800}})
	p := policy(t, "  - {name: p, outflow: 5/s, queue: 20}\n")
	a, err := replay.Run(context.Background(), p, src, replay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := replay.Run(context.Background(), p, src, replay.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("two replays of one trace differ:\n%+v\n%+v", a, b)
	}
	if a.Rejected == 0 || a.Accepted+a.Rejected != a.Submitted || a.Delivered != a.Accepted {
		t.Errorf("bursts over hot keys at 5/s: %+v; want some rejected, every accepted job delivered", a)
	}
}

func TestRunBadTrace(t *testing.T) {
	p := policy(t, "  - {name: p, outflow: 1/s, queue: 2}\n")
	bad := func() (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader("at,key,size,outcome\n1,a,1,\n0,a,1,\n")), nil
	}
	_, err := replay.Run(context.Background(), p, bad, replay.Config{})
	if !errors.Is(err, traffic.ErrFormat) || !strings.Contains(err.Error(), "line 3") {
		t.Errorf("Run over a trace going back in time: %v, want ErrFormat naming line 3", err)
	}
	_, err = replay.RunAll(context.Background(), []policies.Policy{p, p}, bad, replay.Config{})
	if !errors.Is(err, traffic.ErrFormat) {
		t.Errorf("RunAll over a bad trace: %v, want ErrFormat", err)
	}
	missing := func() (io.ReadCloser, error) { return nil, errors.New("no such file") }
	if _, err := replay.Run(context.Background(), p, missing, replay.Config{}); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Errorf("Run over a trace that does not open: %v", err)
	}
}

// A long trace keeps a bounded series.
func TestSeriesBounded(t *testing.T) {
	src := synthetic(t, traffic.Synth{Duration: 2 * time.Hour, Rate: 2, Keys: 5, Seed: 1})
	res, err := replay.Run(context.Background(), policy(t, "  - {name: p, outflow: 1/s, queue: 5}\n"), src, replay.Config{Series: true})
	if err != nil {
		t.Fatal(err)
	}
	s := res.Series
	if n := len(s.Points); n > 1024 || n < 512 || time.Duration(n)*s.Step < 2*time.Hour {
		t.Errorf("2 h in %d points of %v: want 512 to 1,024 points covering the trace", n, s.Step)
	}
	var delivered uint64
	for _, pt := range s.Points {
		delivered += pt.Deliveries
	}
	if delivered != res.Delivered {
		t.Errorf("the series counts %d deliveries, the result %d", delivered, res.Delivered)
	}
}

// check compares the figures of got with want (Policy and Series aside;
// wait quantiles within the 0.8 % of the replay's histogram).
func check(t *testing.T, got, want replay.Result) {
	t.Helper()
	got.Policy, got.Series = want.Policy, nil
	if want.Span == 0 {
		want.Span = got.Span
	}
	for _, q := range []struct{ got, want *time.Duration }{{&got.Wait.P50, &want.Wait.P50}, {&got.Wait.P99, &want.Wait.P99}} {
		if d := *q.got - *q.want; d < 0 && -d <= *q.want/125 || d >= 0 && d <= *q.want/125 {
			*q.got = *q.want
		}
	}
	if got != want {
		t.Errorf("replay:\n got %+v\nwant %+v", got, want)
	}
}
