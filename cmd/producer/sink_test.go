package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

func TestSink(t *testing.T) {
	s := testenv.NATS(t)
	nc := testenv.Connect(t, s)

	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := runCLI(t, t.Context(), "sink", "--nats-url", s.ClientURL(),
			"--expect", "4", "--duration", "30s", "--json")
		done <- result{out, err}
	}()

	enqueued := time.Now().Add(-200 * time.Millisecond)
	msg := func(subject, id, key string) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Header.Set("Shaper-Job-Id", id)
		m.Header.Set("Shaper-Policy", "orders")
		m.Header.Set("Shaper-Key", key)
		m.Header.Set("Shaper-Enqueued-At", enqueued.Format(time.RFC3339Nano))
		m.Header.Set("Shaper-Attempt", "1")
		m.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		return m
	}

	// The first delivery asks for confirmation, which also waits for the
	// sink to subscribe.
	if reply := deliverConfirmed(t, nc, msg("shaper.out.orders.k0", "j1", "k0")); len(reply.Data) != 0 {
		t.Errorf("confirmation = %q, want an empty message", reply.Data)
	}
	for _, m := range []*nats.Msg{
		msg("shaper.out.orders.k0", "j2", "k0"),
		msg("shaper.out.orders.k0", "j1", "k0"), // a duplicate
		msg("shaper.out.orders.~c3bc", "j3", "ü"),
		msg("shaper.out.orders.k0", "j4", "k0"), // the 4th distinct id stops the sink
	} {
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}

	var r result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("sink did not stop after --expect 4")
	}
	if r.err != nil {
		t.Fatalf("sink: %v", r.err)
	}
	var rep sinkReport
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		t.Fatalf("sink --json output is not a report: %v\n%s", err, r.out)
	}
	if rep.StoppedBy != "expect" {
		t.Errorf("stopped by %q, want expect", rep.StoppedBy)
	}
	tot := rep.Totals
	if tot.Deliveries != 5 || tot.Distinct != 4 || tot.Duplicates != 1 {
		t.Errorf("totals deliveries/distinct/duplicates = %d/%d/%d, want 5/4/1", tot.Deliveries, tot.Distinct, tot.Duplicates)
	}
	if rep.Keys != 2 || len(rep.PerKey) != 2 {
		t.Fatalf("keys = %d (%d rows), want 2", rep.Keys, len(rep.PerKey))
	}
	k0, u := rep.PerKey[0], rep.PerKey[1]
	if k0.Key != "k0" || k0.Deliveries != 4 || k0.Distinct != 3 || k0.Duplicates != 1 || k0.MaxPerSecond != 4 {
		t.Errorf("k0 = %+v, want 4 deliveries, 3 distinct, 1 duplicate, 4 in 1s", k0)
	}
	if k0.RatePerSec <= 0 {
		t.Errorf("k0 rate = %v, want > 0", k0.RatePerSec)
	}
	if u.Key != "ü" || u.Deliveries != 1 || u.Duplicates != 0 {
		t.Errorf("second key = %+v, want ü with 1 delivery", u)
	}
	// Queue latency is receive time minus Shaper-Enqueued-At: at least the 200 ms head start.
	if tot.LatencyP50Ms < 200 || tot.LatencyP99Ms < tot.LatencyP50Ms || tot.LatencyP99Ms > 30_000 {
		t.Errorf("latency p50/p99 = %v/%v ms, want ≥ 200 ms", tot.LatencyP50Ms, tot.LatencyP99Ms)
	}
}

func TestSinkTableAndPrint(t *testing.T) {
	s := testenv.NATS(t)
	nc := testenv.Connect(t, s)
	done := make(chan string, 1)
	go func() {
		out, err := runCLI(t, t.Context(), "sink", "--nats-url", s.ClientURL(),
			"--subject", "out.>", "--expect", "25", "--print")
		if err != nil {
			t.Errorf("sink: %v", err)
		}
		done <- out
	}()
	for i := range 25 {
		m := nats.NewMsg("out.k")
		m.Header.Set("Shaper-Job-Id", "j"+string(rune('a'+i)))
		m.Header.Set("Shaper-Key", "key "+string(rune('a'+i)))
		if i == 0 {
			deliverConfirmed(t, nc, m)
		} else if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	var out string
	select {
	case out = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("sink did not stop after --expect 25")
	}
	t.Logf("sink output:\n%s", out)
	if got := strings.Count(out, "latency=-"); got != 25 {
		t.Errorf("--print printed %d delivery lines, want 25:\n%s", got, out)
	}
	for _, want := range []string{"25 deliveries of 25 distinct jobs", "(5 more keys not shown", "\ntotal "} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// deliverConfirmed sends m as a request until the sink answers it, which
// also waits for the sink to subscribe. "No responders" means the message
// reached nobody, so m is delivered exactly once.
func deliverConfirmed(t *testing.T, nc *nats.Conn, m *nats.Msg) *nats.Msg {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		reply, err := nc.RequestMsg(m, 2*time.Second)
		if err == nil {
			return reply
		}
		if !errors.Is(err, nats.ErrNoResponders) || time.Now().After(deadline) {
			t.Fatalf("confirmed delivery to %s: %v", m.Subject, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// natsOn starts a nats-server on 127.0.0.1:port, shut down when the test ends.
func natsOn(t *testing.T, port int) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// The sink says when it loses and regains its connection, goes on
// receiving after it, and prints progress lines when stderr is not a
// terminal.
func TestSinkReconnects(t *testing.T) {
	first := natsOn(t, -1)
	port := first.Addr().(*net.TCPAddr).Port
	url := first.ClientURL()
	var stdout bytes.Buffer
	var stderr testenv.Buffer
	done := make(chan error, 1)
	go func() {
		done <- runWith(t.Context(), &stdout, &stderr, []string{"producer", "sink", "--nats-url", url,
			"--subject", "out.>", "--expect", "2", "--progress"})
	}()
	waitFor := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(15 * time.Second); !strings.Contains(stderr.String(), what); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("stderr never said %q:\n%s", what, stderr.String())
			}
		}
	}
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	deliverConfirmed(t, nc, &nats.Msg{Subject: "out.k", Header: nats.Header{"Shaper-Job-Id": {"j1"}}})
	waitFor("delivered 1") // a progress line, although stderr is no terminal
	first.Shutdown()
	waitFor("sink: lost the connection to NATS")
	natsOn(t, port)
	waitFor("sink: reconnected to")
	deliverConfirmed(t, nc, &nats.Msg{Subject: "out.k", Header: nats.Header{"Shaper-Job-Id": {"j2"}}})
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("sink: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("sink did not stop after its 2 deliveries")
	}
	if !strings.Contains(stdout.String(), "2 deliveries of 2 distinct jobs") {
		t.Errorf("report:\n%s", stdout.String())
	}
}

// A key of the same name in two policies is two rows: each policy paces it
// on its own.
func TestSinkKeysPerPolicy(t *testing.T) {
	m := &meter{keys: make(map[policyKey]*keyStats)}
	at := time.Now()
	for i, p := range []string{"orders", "emails", "orders"} {
		m.add(delivery{At: at.Add(time.Duration(i) * time.Second), Key: "k0", ID: fmt.Sprint(i), Policy: p})
	}
	_, perKey := m.stop()
	if len(perKey) != 2 || perKey[0].Policy != "orders" || perKey[0].Deliveries != 2 || perKey[1].Policy != "emails" || perKey[1].Deliveries != 1 {
		t.Errorf("per key: %+v, want orders/k0 with 2 deliveries, then emails/k0 with 1", perKey)
	}
}

// A key a NATS header cannot carry (a line break, white space at an end)
// is read from the subject's token; any other header is taken as it is.
func TestParseDeliveryKey(t *testing.T) {
	for _, key := range []string{"x\ny", " lead", "a\r\nX-Evil: 1", "plain", "é/ü"} {
		token, err := queue.EncodeKey(key)
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg("shaper.out.orders." + token)
		m.Header.Set(client.HeaderKey, queue.HeaderForm(key))
		if got := parseDelivery(m, time.Now()).Key; got != key {
			t.Errorf("key %q delivered with header %q: read %q, want the key", key, queue.HeaderForm(key), got)
		}
	}
	m := nats.NewMsg("shaper.out.orders.k1")
	m.Header.Set(client.HeaderKey, "from a webhook bridge")
	if got := parseDelivery(m, time.Now()).Key; got != "from a webhook bridge" {
		t.Errorf("a header that is no form of the token's key: read %q, want the header", got)
	}
}

// TestSinkFailEvery: with --fail-every 1 the sink answers no delivery of a
// real shaper: every attempt fails after deliver.timeout, each job is
// retried and then dead-lettered, and the sink counts the attempts it left
// unanswered apart from its deliveries.
func TestSinkFailEvery(t *testing.T) {
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t,
		"policies:\n  - name: p\n    outflow: 50/s\n    queue: 10\n    deliver: {timeout: 200ms}\n    retry: {attempts: 2, backoff: 50ms}\n")})
	done := make(chan string, 1)
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	go func() {
		out, err := runCLI(t, ctx, "sink", "--nats-url", s.NATSURL(), "--subject", "shaper.out.p.>",
			"--fail-every", "1", "--json")
		if err != nil {
			t.Errorf("sink: %v", err)
		}
		done <- out
	}()
	// Subscribed once a request finds a responder that does not answer
	// (no responders otherwise): that probe is one more attempt left
	// unanswered.
	nc, err := nats.Connect(s.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, err := nc.Request("shaper.out.p.probe", nil, 200*time.Millisecond)
		if errors.Is(err, nats.ErrTimeout) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sink did not subscribe: %v", err)
		}
	}
	for i := range 2 {
		resp, err := http.Post("http://"+s.HTTPAddr()+"/v1/jobs/p/k", "application/octet-stream", strings.NewReader(fmt.Sprint("job ", i)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("submit = %s", resp.Status)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); s.Status()[0].Dead < 2 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	stop() // as Ctrl-C does
	var rep sinkReport
	if err := json.Unmarshal([]byte(<-done), &rep); err != nil {
		t.Fatal(err)
	}
	st := s.Status()[0]
	if rep.Unanswered != 5 || rep.Totals.Deliveries != 0 || st.Dead != 2 || st.Delivered != 0 {
		t.Errorf("sink: %d unanswered, %d deliveries; shaper: %d dead letters, %d delivered; want 5 unanswered (the probe, and 2 jobs × 2 attempts), none delivered, both jobs dead-lettered",
			rep.Unanswered, rep.Totals.Deliveries, st.Dead, st.Delivered)
	}
}
