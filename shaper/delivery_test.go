package shaper_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

// A job submitted before any consumer exists is not "delivered": it stays
// queued, its status says it waits for a consumer, no attempt is counted,
// and the first consumer to subscribe takes it as attempt 1.
func TestConfirmedDeliveryWaitsForAConsumer(t *testing.T) {
	r := start(t, "policies:\n  - name: p\n    outflow: 50/s\n    queue: 10\n")
	api, err := client.New(r.base, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	res, err := api.Submit(ctx, "p", "k", []byte("hello"))
	if err != nil || res.Outcome != client.OutcomeAccepted {
		t.Fatalf("Submit = %+v, %v", res, err)
	}
	var job client.Job
	waitFor(t, "the job's status to say it waits for a consumer", 10*time.Second, func() bool {
		job, err = api.Job(ctx, res.ID)
		return err == nil && strings.HasPrefix(job.Reason, drain.WaitingForConsumer)
	})
	if job.Status != client.JobQueued || job.Attempts != 0 {
		t.Errorf("job without a consumer = %+v, want queued with no attempt", job)
	}
	if p, _ := api.Policy(ctx, "p"); p.Delivered != 0 || p.Failed != 0 || p.Queued != 1 {
		t.Errorf("policy without a consumer: delivered %d, failed %d, queued %d; want 0, 0, 1", p.Delivered, p.Failed, p.Queued)
	}

	got := make(chan *nats.Msg, 1)
	sub, err := r.nc.QueueSubscribe("shaper.out.p.>", "workers", func(m *nats.Msg) {
		got <- m
		m.Respond(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	select {
	case m := <-got:
		if string(m.Data) != "hello" || m.Header.Get(client.HeaderJobID) != res.ID {
			t.Errorf("delivery = %q id %q, want hello id %s", m.Data, m.Header.Get(client.HeaderJobID), res.ID)
		}
		if a := m.Header.Get(client.HeaderAttempt); a != "" && a != "1" {
			t.Errorf("Shaper-Attempt = %s after waiting for a consumer, want 1", a)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery 10s after a consumer subscribed")
	}
	waitFor(t, "the job delivered", 5*time.Second, func() bool {
		job, err = api.Job(ctx, res.ID)
		return err == nil && job.Status == client.JobDelivered
	})
}

// A key whose queue is full because no consumer takes its deliveries
// says so in its 429, from the drain's own account (the sink of the
// shaper that delivers it), for reject and defer alike: its Retry-After
// is the drain's probe of the subject, not its outflow. Once a consumer
// answers, a full key's 429 no longer says it.
func TestFullKeySaysItWaitsForAConsumer(t *testing.T) {
	r := start(t, "policies:\n  - {name: p, outflow: 1/m, queue: 2}\n  - {name: d, outflow: 1/m, queue: 2, overflow: defer}\n")
	detail := func(policy string) string {
		t.Helper()
		for range 3 {
			if a := r.post(t, policy, "k", []byte("x")); a.code == 429 {
				d, _ := a.body["detail"].(string)
				return d
			}
		}
		t.Fatalf("no 429 for %s after 3 jobs into a queue of 2", policy)
		return ""
	}
	want := ": " + drain.WaitingForConsumer + " since "
	waitFor(t, "a delivery of each policy to find no consumer", 10*time.Second, func() bool {
		return strings.Contains(detail("p"), want) && strings.Contains(detail("d"), want)
	})
	if d := detail("d"); !strings.Contains(d, "the job is deferred") {
		t.Errorf("defer policy's 429 = %q, want it to say the job is deferred too", d)
	}

	taken := make(chan struct{}, 10)
	sub, err := r.nc.Subscribe("shaper.out.p.>", func(m *nats.Msg) {
		m.Respond(nil)
		taken <- struct{}{}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	select {
	case <-taken: // the head; the key's next slot is a minute away
	case <-time.After(10 * time.Second):
		t.Fatal("no delivery 10s after a consumer subscribed")
	}
	// The consumer's answer reaches the drain a moment after the consumer
	// sent it.
	deadline := time.Now().Add(5 * time.Second)
	for d := detail("p"); d != `queue of key "k" is full`; d = detail("p") {
		if time.Now().After(deadline) {
			t.Fatalf("429 5s after a consumer answered = %q, want only that the queue is full", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deliver: {mode: publish} publishes and forgets: a job reaches whoever
// is subscribed, without a reply, and counts as delivered.
func TestPublishModeDeliversWithoutReply(t *testing.T) {
	r := start(t, "policies:\n  - name: p\n    outflow: 50/s\n    queue: 10\n    deliver: {mode: publish}\n")
	got := collect(t, r.nc, "shaper.out.p.>") // never replies
	api, err := client.New(r.base, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if res, err := api.Submit(context.Background(), "p", "k", nil); err != nil || res.Outcome != client.OutcomeAccepted {
			t.Fatalf("Submit = %+v, %v", res, err)
		}
	}
	if msgs := got(3, 10*time.Second); len(msgs) != 3 || msgs[0].Reply != "" {
		t.Fatalf("got %d deliveries (reply subject %q), want 3 plain publishes", len(msgs), msgs[0].Reply)
	}
	waitFor(t, "3 delivered", 5*time.Second, func() bool {
		p, _ := api.Policy(context.Background(), "p")
		return p.Delivered == 3
	})
}

// A job whose deliveries failed before its shaper stopped resumes after the
// restart with its attempts: Shaper-Attempt counts across restarts.
func TestAttemptsCountAcrossRestarts(t *testing.T) {
	const yaml = "policies:\n  - name: p\n    outflow: 50/s\n    queue: 10\n    deliver: {timeout: 200ms}\n    retry: {attempts: 10, backoff: 50ms, max_backoff: 100ms}\n"
	dir := t.TempDir()
	first := start(t, yaml, func(c *shaper.Config) { c.DataDir = dir })
	attempts := make(chan string, 100)
	sub, err := first.nc.Subscribe("shaper.out.p.>", func(m *nats.Msg) { attempts <- m.Header.Get(client.HeaderAttempt) }) // takes, never answers
	if err != nil {
		t.Fatal(err)
	}
	first.nc.Flush()
	api, err := client.New(first.base, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := api.Submit(context.Background(), "p", "k", []byte("x"))
	if err != nil || res.Outcome != client.OutcomeAccepted {
		t.Fatalf("Submit = %+v, %v", res, err)
	}
	for range 2 {
		select {
		case <-attempts:
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery attempt")
		}
	}
	waitFor(t, "two failed attempts recorded", 10*time.Second, func() bool {
		j, err := api.Job(context.Background(), res.ID)
		return err == nil && j.Attempts >= 2
	})
	// Their history is recorded with them, for the drainer after the
	// restart to go on from (a tour's dead letter after a kill -9 began
	// "resumed after 2 failed attempts", the errors before it lost).
	if j, err := api.Job(context.Background(), res.ID); err != nil || !strings.Contains(fmt.Sprint(j.History), "attempt 1: ") || !strings.Contains(fmt.Sprint(j.History), "attempt 2: ") {
		t.Errorf("record of a job failed twice: %+v, %v; want the history of both attempts", j, err)
	}
	sub.Unsubscribe()
	first.Stop()

	second := start(t, yaml, func(c *shaper.Config) { c.DataDir = dir })
	got := make(chan *nats.Msg, 1)
	if _, err := second.nc.Subscribe("shaper.out.p.>", func(m *nats.Msg) { m.Respond(nil); got <- m }); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		n, _ := strconv.Atoi(m.Header.Get(client.HeaderAttempt))
		if n < 3 {
			t.Errorf("Shaper-Attempt after 2+ failed attempts and a restart = %q, want at least 3", m.Header.Get(client.HeaderAttempt))
		}
	case <-time.After(15 * time.Second):
		t.Fatal("no delivery after the restart")
	}
}

// A job admitted while its key's deliveries find no consumer is answered
// 202 saying so (waiting_for_consumer_since), over HTTP and NATS, from the
// same answer of the drain as its ETA: the ETA holds once one subscribes.
// Once a consumer answers, a 202 no longer says it.
func TestAcceptedSaysItWaitsForAConsumer(t *testing.T) {
	type submitter interface {
		Submit(ctx context.Context, policy, key string, payload []byte, opts ...client.SubmitOption) (client.Result, error)
	}
	r := start(t, "policies:\n  - {name: p, outflow: 20/s, queue: 100}\n")
	api, err := client.New(r.base, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	overNATS, err := client.NewNATS(r.nc, client.NATSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a 202 saying no consumer answers", 10*time.Second, func() bool {
		a := r.post(t, "p", "k", []byte("x"))
		since, _ := a.body["waiting_for_consumer_since"].(string)
		at, err := time.Parse(time.RFC3339, since)
		return a.code == 202 && err == nil && time.Since(at) < time.Minute
	})
	for name, s := range map[string]submitter{"http": api, "nats": overNATS} {
		res, err := s.Submit(t.Context(), "p", "k", []byte("x"))
		if err != nil || res.Outcome != client.OutcomeAccepted || res.WaitingForConsumer.IsZero() {
			t.Errorf("%s: Submit = %+v, %v; want accepted, waiting for a consumer", name, res, err)
		}
	}

	sub, err := r.nc.Subscribe("shaper.out.p.>", func(m *nats.Msg) { m.Respond(nil) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	waitFor(t, "a 202 without waiting_for_consumer_since", 10*time.Second, func() bool {
		a := r.post(t, "p", "k", []byte("x"))
		_, waiting := a.body["waiting_for_consumer_since"]
		return a.code == 202 && !waiting
	})
	for name, s := range map[string]submitter{"http": api, "nats": overNATS} {
		res, err := s.Submit(t.Context(), "p", "k", []byte("x"))
		if err != nil || res.Outcome != client.OutcomeAccepted || !res.WaitingForConsumer.IsZero() {
			t.Errorf("%s: Submit with a consumer = %+v, %v; want accepted, no wait for a consumer", name, res, err)
		}
	}
}
