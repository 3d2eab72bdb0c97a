package shaper_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/client"
)

// pipelined sends every request at once, each with its own reply subject
// under one inbox (as a JetStream async publisher does), and returns the
// replies in the order the requests were sent.
func pipelined(t *testing.T, nc *nats.Conn, subjects []string, hdr nats.Header) []map[string]any {
	t.Helper()
	inbox := nats.NewInbox()
	var (
		mu      sync.Mutex
		replies = make([]map[string]any, len(subjects))
		got     int
		done    = make(chan struct{})
	)
	sub, err := nc.Subscribe(inbox+".*", func(m *nats.Msg) {
		i, err := strconv.Atoi(m.Subject[len(inbox)+1:])
		var body map[string]any
		if err != nil || json.Unmarshal(m.Data, &body) != nil {
			t.Errorf("reply on %s: %q", m.Subject, m.Data)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if replies[i] == nil {
			replies[i], got = body, got+1
			if got == len(subjects) {
				close(done)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	for i, subj := range subjects {
		m := &nats.Msg{Subject: subj, Reply: inbox + "." + strconv.Itoa(i), Data: []byte(strconv.Itoa(i)), Header: hdr}
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		mu.Lock()
		t.Fatalf("%d of %d replies after 20s", got, len(subjects))
	}
	return replies
}

// The NATS ingress is pipelined: requests sent back to back are each
// answered, jobs of one key are queued (and delivered) in the order they
// were sent, and a full key, a defer policy, an admission limit and bad
// input each get their own answer.
func TestNATSIngressPipelined(t *testing.T) {
	r := start(t, `
policies:
  - name: pipe
    outflow: 200/s
    queue: 300
  - name: small
    outflow: 1/h
    queue: 3
  - name: later
    outflow: 1/h
    queue: 2
    overflow: defer
  - name: limited
    outflow: 100/s
    queue: 100
    admit: {algorithm: fixed_window, limit: 5/1h}
`)
	wait := collect(t, r.nc, "shaper.out.pipe.>")

	// 300 jobs to one key and 200 spread over others, interleaved.
	var subjects []string
	for i := range 500 {
		if i%5 < 3 {
			subjects = append(subjects, "shaper.submit.pipe.one")
		} else {
			subjects = append(subjects, fmt.Sprintf("shaper.submit.pipe.k%d", i%40))
		}
	}
	replies := pipelined(t, r.nc, subjects, nil)
	ids := map[string]bool{}
	var one []string // ids of key "one", in the order sent
	for i, b := range replies {
		if b["status"] != "queued" || b["id"] == "" {
			t.Fatalf("reply %d = %v, want queued with an id", i, b)
		}
		id := b["id"].(string)
		if ids[id] {
			t.Fatalf("id %s answered twice", id)
		}
		ids[id] = true
		if subjects[i] == "shaper.submit.pipe.one" {
			one = append(one, id)
		}
	}
	var got []string
	for _, m := range wait(500, 30*time.Second) {
		if m.Subject == "shaper.out.pipe.one" {
			got = append(got, m.Header.Get(queue.HeaderJobID))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(one) {
		t.Errorf("key one delivered %d jobs out of the order they were sent in:\n got %v\nwant %v", len(got), got, one)
	}

	// A full key: 3 queued, then rejected with the time until a slot frees.
	replies = pipelined(t, r.nc, []string{"shaper.submit.small.k", "shaper.submit.small.k", "shaper.submit.small.k", "shaper.submit.small.k", "shaper.submit.small.k"}, nil)
	for i, b := range replies {
		want := "queued"
		if i >= 3 {
			want = "rejected"
		}
		if b["status"] != want {
			t.Errorf("small reply %d = %v, want %s", i, b, want)
		}
		if want == "rejected" && (b["retry_after_ms"] == nil || b["code"] != 429.0) {
			t.Errorf("small reply %d = %v, want code 429 with retry_after_ms", i, b)
		}
	}

	// A defer policy: the job the full key refuses is deferred, with an id.
	replies = pipelined(t, r.nc, []string{"shaper.submit.later.k", "shaper.submit.later.k", "shaper.submit.later.k", "shaper.submit.later.k"}, nil)
	for i, b := range replies {
		want := "queued"
		if i >= 2 {
			want = "deferred"
		}
		if b["status"] != want || b["id"] == "" {
			t.Errorf("later reply %d = %v, want %s with an id", i, b, want)
		}
	}

	// An admission limit of 5: the 6th and 7th are refused before the queue.
	var lim []string
	for range 7 {
		lim = append(lim, "shaper.submit.limited.k")
	}
	replies = pipelined(t, r.nc, lim, nil)
	queued, rejected := 0, 0
	for _, b := range replies {
		switch b["status"] {
		case "queued":
			queued++
		case "rejected":
			rejected++
		}
	}
	if queued != 5 || rejected != 2 {
		t.Errorf("7 submissions under an admission limit of 5: %d queued, %d rejected; want 5, 2 (%v)", queued, rejected, replies)
	}

	// Bad input.
	for _, c := range []struct {
		subject string
		data    []byte
		code    float64
	}{
		{"shaper.submit.nope.k", nil, 404},
		{"shaper.submit.pipe.~!!", nil, 400},
		{"shaper.submit.pipe", nil, 400},
		{"shaper.submit.pipe.k", make([]byte, 1<<20+1), 413},
	} {
		m, err := r.nc.Request(c.subject, c.data, 5*time.Second)
		if err != nil {
			t.Fatalf("request %s: %v", c.subject, err)
		}
		var b map[string]any
		json.Unmarshal(m.Data, &b)
		if b["code"] != c.code || b["status"] != "error" {
			t.Errorf("%s = %v, want error %v", c.subject, b, c.code)
		}
	}

	// The queue's stream gone (as when JetStream loses it): 503, not a hang.
	js, err := jetstream.New(r.nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(context.Background(), "SHAPER_Q_pipe"); err != nil {
		t.Fatal(err)
	}
	replies = pipelined(t, r.nc, []string{"shaper.submit.pipe.a", "shaper.submit.pipe.b"}, nil)
	for i, b := range replies {
		if b["code"] != 503.0 || b["retry_after_ms"] == nil {
			t.Errorf("with the stream gone, reply %d = %v, want 503 with retry_after_ms", i, b)
		}
	}
}

// A submission whose reply subject is the shaper's or JetStream's own is
// dropped, neither stored nor answered: a tour's producer, allowed only
// shaper.submit.>, had the shaper publish its answer as a job into a
// queue stream (reply shaper.q.<policy>.<key>), past admission, and
// toward $JS.API.
func TestNATSSubmissionReplyToOwnSubjectsDropped(t *testing.T) {
	r := start(t, "policies:\n  - {name: p, outflow: 1/s, queue: 5}\n")
	spy, err := r.nc.SubscribeSync("shaper.q.p.>")
	if err != nil {
		t.Fatal(err)
	}
	for _, reply := range []string{"shaper.q.p.victim", "$JS.API.STREAM.DELETE.SHAPER_DEAD_p", "_shaper.answers.p.1.0"} {
		if err := r.nc.PublishRequest("shaper.submit.p.src", reply, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	r.nc.Flush()
	// A request answered normally after them shows they were handled.
	n, err := client.NewNATS(r.nc, client.NATSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := n.Submit(t.Context(), "p", "ok", []byte("y")); err != nil || res.Outcome != client.OutcomeAccepted {
		t.Fatalf("a submission after them = %+v, %v", res, err)
	}
	st := r.Status()[0]
	if st.Admitted != 1 {
		t.Errorf("admitted %d, want 1 (only the submission with an inbox to answer)", st.Admitted)
	}
	for {
		m, err := spy.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		if strings.HasSuffix(m.Subject, ".victim") {
			t.Errorf("the shaper published on %s: %s", m.Subject, m.Data)
		}
	}
}
