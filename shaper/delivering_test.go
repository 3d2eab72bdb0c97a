package shaper_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

// A job whose delivery awaits the consumer's answer is queued still, and
// GET /v1/jobs/{id} says since when it is being delivered and which
// attempt it is, instead of a reason it waits: a consumer slow to answer
// can be told from one that never got the job. A key whose deliveries fly
// apart (concurrency.key above 1) says since when, not the attempt. With
// two shapers, each answers it: the one that drains the key's partition,
// and the other by asking it.
func TestJobStatusWhileDelivering(t *testing.T) {
	for _, c := range []struct {
		name, extra string
		attempt     float64
		shapers     int
	}{
		{"one at a time", "", 1, 1},
		{"flights", ", concurrency: {key: 2}", 0, 1},
		{"two shapers", "", 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			release := make(chan struct{})
			var got atomic.Int32
			hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				got.Add(1)
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}))
			defer hook.Close()
			defer close(release)
			yaml := "policies:\n  - {name: p, outflow: 10/s, queue: 10, deliver: {webhook: '" + hook.URL + "', timeout: 20s}" + c.extra + "}\n"
			var rs []*running
			if c.shapers == 1 {
				rs = append(rs, start(t, yaml))
			} else {
				ns := testenv.NATS(t)
				for _, id := range []string{"a", "b"} {
					rs = append(rs, wrap(t, testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, yaml), NATSURL: ns.ClientURL(), InstanceID: id, LeaseTTL: 1200 * time.Millisecond})))
				}
				time.Sleep(time.Second) // the partitions shared out
			}
			ids := rs[0].acceptAll(t, "p", "k", 1)
			before := time.Now()
			waitFor(t, "the delivery at the webhook", 10*time.Second, func() bool { return got.Load() == 1 })
			for i, r := range rs {
				code, body := jobStatus(t, r.base, ids[0])
				since, _ := time.Parse(time.RFC3339Nano, asString(body["delivering_since"]))
				if code != http.StatusOK || body["status"] != "queued" || since.IsZero() || since.Before(before.Add(-time.Second)) || since.After(time.Now()) {
					t.Fatalf("status of a job being delivered, asked of shaper %d = %d %v, want queued with delivering_since about now", i, code, body)
				}
				if a, _ := body["delivering_attempt"].(float64); a != c.attempt {
					t.Errorf("delivering_attempt from shaper %d = %v, want %v", i, body["delivering_attempt"], c.attempt)
				}
				if reason, ok := body["reason"]; ok {
					t.Errorf("a job being delivered has a reason it waits, from shaper %d: %v", i, reason)
				}
				// The Go client reads it too.
				c2, err := client.New(r.base, client.Config{})
				if err != nil {
					t.Fatal(err)
				}
				job, err := c2.Job(t.Context(), ids[0])
				// (Asked of another shaper, since is its now less how long.)
				if d := job.DeliveringSince.Sub(since).Abs(); err != nil || d > 100*time.Millisecond || float64(job.DeliveringAttempt) != c.attempt {
					t.Errorf("client Job from shaper %d = %+v, %v; want delivering since %v, attempt %v", i, job, err, since, c.attempt)
				}
			}
		})
	}
}

func asString(v any) string { s, _ := v.(string); return s }
