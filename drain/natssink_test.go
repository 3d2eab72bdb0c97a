package drain_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/queue"
)

// A consumer built on NATS micro that answers a delivery with
// Request.Error has not taken the job: the attempt fails, naming its
// error; any other answer is taken.
func TestNATSSinkMicroErrorFails(t *testing.T) {
	nc := testenv.Connect(t, testenv.NATS(t))
	svc, err := micro.AddService(nc, micro.Config{Name: "worker", Version: "1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	for token, h := range map[string]micro.HandlerFunc{
		"busy": func(r micro.Request) { r.Error("503", "busy, try later", nil) },
		"ok":   func(r micro.Request) { r.Respond(nil) },
	} {
		if err := svc.AddEndpoint(token, h, micro.WithEndpointSubject("out.p."+token)); err != nil {
			t.Fatal(err)
		}
	}
	sink, err := drain.NewNATSSink(nc, drain.NATSConfig{Subject: "out.p", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	deliver := func(token string) error {
		return sink.Deliver(t.Context(), &drain.Delivery{Policy: "p", Token: token,
			Msg: &queue.Msg{Seq: 1, Job: queue.Job{ID: "j1", Key: token, Payload: []byte("x")}}})
	}
	err = deliver("busy")
	if !errors.Is(err, drain.ErrDelivery) || !strings.Contains(err.Error(), "the consumer answered error 503: busy, try later") {
		t.Errorf("delivery answered by micro's Request.Error = %v, want a failed delivery naming the error", err)
	}
	if err := deliver("ok"); err != nil {
		t.Errorf("delivery answered by micro's Respond = %v, want taken", err)
	}
}

// A delivery that nobody answers in time says which bound ran out (a
// tour's dead letters read "context deadline exceeded"), and stays a
// timeout (the adaptive drain counts timeouts), over NATS and to a webhook.
func TestDeliveryTimeoutSaysSo(t *testing.T) {
	nc := testenv.Connect(t, testenv.NATS(t))
	sub, err := nc.Subscribe("out.p.>", func(*nats.Msg) {}) // takes, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	sink, err := drain.NewNATSSink(nc, drain.NATSConfig{Subject: "out.p", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang }))
	defer srv.Close() // after the handlers return
	defer close(hang)
	for name, s := range map[string]drain.Sink{"nats": sink, "webhook": drain.NewWebhookSink(srv.URL, 50*time.Millisecond, nil)} {
		err := s.Deliver(t.Context(), &drain.Delivery{Policy: "p", Token: "k",
			Msg: &queue.Msg{Seq: 1, Job: queue.Job{ID: "j1", Key: "k", Payload: []byte("x")}}})
		if !errors.Is(err, drain.ErrDelivery) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer within deliver.timeout (50ms)") {
			t.Errorf("%s: unanswered delivery = %v, want a failed delivery, a timeout, saying no answer came within deliver.timeout (50ms)", name, err)
		}
	}
}
