package drain_test

import (
	"errors"
	"strings"
	"testing"
	"time"

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
