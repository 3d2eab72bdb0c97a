package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper/client"
)

// A producer submits a job, waiting out a full queue for up to ten
// seconds, and acts on each answer.
func ExampleClient_Submit() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8080", client.Config{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Submit(ctx, "orders", "tenant a/42", []byte(`{"order": 42}`),
		client.WithIdempotencyKey("order-42"), client.WithRetry(10*time.Second))
	var refused *client.Error
	switch {
	case errors.Is(err, client.ErrUnknownPolicy):
		log.Fatal("no policy orders on this shaper")
	case errors.As(err, &refused):
		log.Printf("refused: %d %s (try again in %v)", refused.StatusCode, refused.Problem.Detail, refused.RetryAfter)
	case err != nil:
		log.Printf("no answer: %v", err)
	case res.Outcome == client.OutcomeAccepted:
		log.Printf("job %s queued, delivered in about %v", res.ID, res.ETA)
	case res.Outcome == client.OutcomeDeferred:
		log.Printf("job %s kept, runs in about %v", res.ID, res.RetryAfter)
	default: // rejected or limited, still after ten seconds
		log.Printf("%v: come back in %v", res.Outcome, res.RetryAfter)
	}
}

// The same submission by NATS request, over a connection the caller owns.
func ExampleNATS_Submit() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	n, err := client.NewNATS(nc, client.NATSConfig{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := n.Submit(context.Background(), "orders", "tenant a/42", []byte(`{"order": 42}`))
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%v %s", res.Outcome, res.ID)
}

// An operator tunes a policy live and looks at its figures.
func ExampleClient_SetPolicy() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:8080", client.Config{Token: "operator-token"})
	if err != nil {
		log.Fatal(err)
	}
	rate, err := policies.ParseRate("50/s")
	if err != nil {
		log.Fatal(err)
	}
	// Change the outflow and the queue, take the retry attempts back to the
	// policy file's, and leave every other field as it is.
	p, err := c.SetPolicy(ctx, "orders", client.PolicyChange{
		Outflow: policies.Value(rate),
		Queue:   policies.Value(200),
		Retry:   policies.Value(policies.RetryPatch{Attempts: policies.Null[int]()}),
	})
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("%s: %v per key, queue %d, %d keys queued", p.Name, p.Outflow, p.Queue, p.Keys)
}

// A NATS reply decodes into Reply; its status is a ReplyStatus.
func ExampleReply() {
	data := []byte(`{"status":"deferred","id":"dn2hhalst0lg-7","policy":"orders","key":"acme","queued":0,"eta_ms":0,"retry_after_ms":1500,"deferred":true,"code":429}`)
	var r client.Reply
	if err := json.Unmarshal(data, &r); err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Status, r.Status == client.ReplyDeferred, r.Code, r.RetryAfterMs)
	// Output: deferred true 429 1500
}

// A PolicyChange sends only the fields it sets or resets: a JSON merge
// patch.
func ExamplePolicyChange() {
	rate, _ := policies.ParseRate("5/10s")
	b, _ := json.Marshal(client.PolicyChange{
		Outflow: policies.Value(rate),
		Total:   policies.Value(policies.Rate{}), // no cap
		Retry: policies.Value(policies.RetryPatch{
			Backoff: policies.Value(7 * time.Second),
			Budget:  policies.Null[policies.Budget](), // back to the file's
		}),
		Admit: policies.Value(policies.AdmitPatch{Off: true}),
	})
	fmt.Println(string(b))
	// Output: {"outflow":"5/10s","total":"","retry":{"backoff":"7s","budget":null},"admit":"off"}
}
