package drain_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// NextTry, asked at every instant a failed job waits, is when its retry
// then starts: the schedule's answer is what the scheduler does, with a
// retry budget (the retries wait for the key's credit, behind the fresh
// jobs) and without one (the failed head blocks its key), and with
// several failed jobs due at once.
func TestNextTryIsWhenTheRetryGoes(t *testing.T) {
	for _, c := range []struct {
		name    string
		budget  float64
		backoff time.Duration
	}{
		{"budget 20%", 0.2, 10 * time.Millisecond},
		{"budget 20%, backoff of 3 slots", 0.2, 30 * time.Millisecond},
		{"no budget", 0, 25 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				checkNextTry(t, c.budget, c.backoff)
			})
		})
	}
}

func checkNextTry(t *testing.T, budget float64, backoff time.Duration) {
	interval := 10 * time.Millisecond
	r := newMemRig(t, 100, drain.Pace{Interval: interval, Retry: drain.Retry{
		Attempts: 10, Backoff: backoff, MaxBackoff: backoff, Budget: budget}}, drain.Config{Jitter: func() float64 { return 0 }})
	failing := map[string]int{"k-0": 3, "k-2": 2, "k-3": 2} // failed attempts before success
	r.sink.setFail(func(d *drain.Delivery) error {
		if d.Msg.Attempt <= failing[d.Msg.ID] {
			return errDown
		}
		return nil
	})
	ids := r.admit("k", 30)
	token, err := queue.EncodeKey("k")
	if err != nil {
		t.Fatal(err)
	}
	r.d.Start(t.Context())

	// Each prediction: the job, the attempt it will be, and when.
	type said struct {
		id      string
		attempt int
		at      time.Time
	}
	var predictions []said
	attempts := func(id string) int { // attempts of id so far
		n := 0
		for _, d := range r.sink.tries() {
			if d.id == id {
				n++
			}
		}
		return n
	}
	for range 400 { // 400 ms: every job delivered, with its retries
		synctest.Wait()
		now := time.Now()
		for i, id := range ids {
			if in, ok := r.d.NextTry(token, uint64(i+1), now); ok {
				predictions = append(predictions, said{id, attempts(id) + 1, now.Add(in)})
			}
		}
		time.Sleep(time.Millisecond)
	}
	r.sink.wait(t, len(ids), time.Second)

	started := map[[2]any]time.Time{}
	for _, d := range r.sink.tries() {
		started[[2]any{d.id, d.attempt}] = d.at
	}
	asked := map[string]int{}
	for _, p := range predictions {
		asked[p.id]++
		got, ok := started[[2]any{p.id, p.attempt}]
		if !ok {
			t.Errorf("NextTry said %s's attempt %d starts at %v: it never did", p.id, p.attempt, p.at.Format("05.000"))
			continue
		}
		if !got.Equal(p.at) {
			t.Errorf("NextTry said %s's attempt %d starts at %v; it started at %v", p.id, p.attempt,
				p.at.Format("05.000"), got.Format("05.000"))
		}
	}
	for id, n := range failing {
		if asked[id] == 0 {
			t.Errorf("NextTry never answered for %s, which failed %d times", id, n)
		}
	}
	t.Logf("%d answers of NextTry, by job: %v", len(predictions), asked)
	if t.Failed() {
		for _, d := range r.sink.tries() {
			t.Logf("%s attempt %d at %v", d.id, d.attempt, d.at.Format("05.000"))
		}
	}
}
