package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/queue"
)

// TestRemoveAsksTheJetStreamOfItsQueue: Remove writes its JetStream API
// request itself, so it must ask under the API prefix or domain the
// queue's JetStream was made with, and free the job's slot there.
func TestRemoveAsksTheJetStreamOfItsQueue(t *testing.T) {
	ctx := context.Background()
	s := testenv.NATSWith(t, func(o *server.Options) { o.JetStreamDomain = "hub" })
	nc := testenv.Connect(t, s)
	plain, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	domain, err := jetstream.NewWithDomain(nc, "hub")
	if err != nil {
		t.Fatal(err)
	}
	prefixed, err := jetstream.NewWithAPIPrefix(nc, "$JS.hub.API")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, policy string
		js           jetstream.JetStream
	}{{"default prefix", "plain", plain}, {"domain", "domain", domain}, {"API prefix", "prefixed", prefixed}} {
		t.Run(c.name, func(t *testing.T) {
			q, err := queue.Open(ctx, c.js, c.policy, 1, queue.Config{Timeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			r, err := q.Admit(ctx, queue.Job{Key: "k", Payload: []byte("x")})
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Remove(ctx, r.Seq); err != nil {
				t.Fatalf("Remove = %v", err)
			}
			// The slot is free: a second job fits a queue of one.
			if _, err := q.Admit(ctx, queue.Job{Key: "k", Payload: []byte("y")}); err != nil {
				t.Errorf("Admit after Remove = %v, want stored", err)
			}
		})
	}
}

// TestRemoveWhatIsGone: a job of a stream deleted under the queue is gone
// as asked: no error (one removed before: TestAdmitFullAtSize; a
// JetStream that does not answer: TestAdmitUnavailable).
func TestRemoveWhatIsGone(t *testing.T) {
	ctx := context.Background()
	q, js := open(t, 5)
	r, err := q.Admit(ctx, queue.Job{Key: "k", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, q.Stream()); err != nil {
		t.Fatal(err)
	}
	if err := q.Remove(ctx, r.Seq); err != nil {
		t.Errorf("Remove on a deleted stream = %v, want nil", err)
	}

}
