package shaper_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/shaper-dev/shaper/queue"
)

// jobStatus asks the shaper at base for job id's status: the HTTP code
// and the decoded body.
func jobStatus(t *testing.T, base, id string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(base + "/v1/jobs/" + url.PathEscape(id))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body
}

// A job admitted straight into its queue has no record: GET /v1/jobs/{id}
// finds it in its queue by the id, and after delivery by its absence from
// the queue (a sequence below the last one, no longer stored).
func TestJobStatusWithoutRecord(t *testing.T) {
	r := start(t, `
policies:
  - name: slow
    outflow: 4/s
    queue: 10
    overflow: reject
`)
	wait := collect(t, r.nc, "shaper.out.slow.>")
	get := func(id string) (int, map[string]any) { return jobStatus(t, r.base, id) }
	ids := r.acceptAll(t, "slow", "k", 4)
	// The last job waits about 750 ms behind the others.
	if code, body := get(ids[3]); code != http.StatusOK || body["status"] != "queued" || body["key"] != "k" || body["policy"] != "slow" {
		t.Errorf("GET /v1/jobs/%s right after 202 = %d %v, want 200 queued, key k, policy slow", ids[3], code, body)
	}
	got := wait(4, 10*time.Second)
	for i, m := range got {
		if m.Header.Get(queue.HeaderJobID) != ids[i] {
			t.Errorf("delivery %d has id %q, want %q", i, m.Header.Get(queue.HeaderJobID), ids[i])
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := get(ids[3])
		if code == http.StatusOK && body["status"] == "delivered" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/jobs/%s after delivery = %d %v, want delivered", ids[3], code, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// An id of the same form that names no stored job, and hostile ids.
	epoch, _, _ := strings.Cut(ids[3], "-")
	for _, id := range []string{epoch + "-zz", epoch + "-0", epoch + "-", "-1", "nosuchjob", "a.b", "*", strings.Repeat("x", 10000)} {
		if code, body := get(id); code != http.StatusNotFound {
			t.Errorf("GET /v1/jobs/%.40q = %d %v, want 404", id, code, body)
		}
	}
}

// A deferred job past its next try, its key still full for want of a
// consumer, says why it is still deferred: re-admission waits for room
// without counting a deferral, so next_try alone would read as stale.
func TestDeferredPastNextTrySaysWhy(t *testing.T) {
	r := start(t, `
policies:
  - name: d
    outflow: 20/s
    queue: 1
    overflow: defer
`)
	var id string
	for i := range 3 {
		if a := r.post(t, "d", "k", []byte(fmt.Sprint(i))); a.code == http.StatusTooManyRequests && a.body["deferred"] == true {
			id = a.body["id"].(string)
			break
		}
	}
	if id == "" {
		t.Fatal("no deferred 429 from a queue of 1")
	}
	var body map[string]any
	waitFor(t, "the deferred job past its next try to say why", 10*time.Second, func() bool {
		_, body = jobStatus(t, r.base, id)
		next, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(body["next_try"]))
		return body["status"] == "deferred" && time.Now().After(next) && body["reason"] != nil
	})
	if reason := fmt.Sprint(body["reason"]); !strings.Contains(reason, "waiting for a consumer since") {
		t.Errorf("deferred job past next_try: reason %q, want it waiting for a consumer (%v)", reason, body)
	}
}

// A failed job's next_try is when the drain's schedule then retries it,
// read when asked: with a retry budget, a second retry waits behind the
// key's fresh jobs for the key's credit, long past the end of its backoff
// that the failure planned.
func TestFailedJobNextTryFromTheSchedule(t *testing.T) {
	r := start(t, `
policies:
  - name: f
    outflow: 10/s
    queue: 50
    retry: {attempts: 5, backoff: 100ms, max_backoff: 100ms, budget: 20%}
`)
	retried := make(chan time.Time, 1) // when the third attempt of job "0" came
	sub, err := r.nc.Subscribe("shaper.out.f.>", func(m *nats.Msg) {
		if string(m.Data) != "0" { // the first two attempts of job "0" fail
			m.Respond(nil)
			return
		}
		if m.Header.Get(queue.HeaderAttempt) == "3" {
			retried <- time.Now()
			m.Respond(nil)
			return
		}
		reply := nats.NewMsg(m.Reply)
		reply.Header.Set(micro.ErrorCodeHeader, "503")
		reply.Header.Set(micro.ErrorHeader, "not now")
		m.RespondMsg(reply)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	ids := r.acceptAll(t, "f", "k", 30)
	// Once its second attempt failed, ask for its next try.
	var next time.Time
	waitFor(t, "the failed job's second failure", 10*time.Second, func() bool {
		_, body := jobStatus(t, r.base, ids[0])
		next, _ = time.Parse(time.RFC3339Nano, fmt.Sprint(body["next_try"]))
		return body["status"] == "queued" && body["delivery_attempts"] == 2.0
	})
	asked := time.Now()
	select {
	case at := <-retried:
		// The hand-over to the consumer, on a busy machine.
		if off := at.Sub(next); off < -20*time.Millisecond || off > 150*time.Millisecond {
			t.Errorf("next_try %v (asked at %v), but the retry came at %v: %v off",
				next.Format("05.000"), asked.Format("05.000"), at.Format("05.000"), off)
		}
		t.Logf("next_try %v after the ask, the retry %v after it", next.Sub(asked).Round(time.Millisecond), at.Sub(next).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("no third attempt of the failed job within 10 s")
	}
}
