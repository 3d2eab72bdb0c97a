package admission_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/admission"
	"github.com/shaper-dev/shaper/shaper/internal/pipeline"
)

type observed struct {
	key  string
	size int
	at   time.Time
	o    admission.Outcome
}

// A gate over in-memory queues, as a replay makes it: Observe hears of
// every submission once, whichever way it was decided, and an in-memory
// admission limit counts in the gate's time, not the wall clock's.
func TestObserve(t *testing.T) {
	set, err := policies.Parse("p.yaml", []byte(`policies:
  - name: p
    outflow: 1/s
    queue: 2
    admit: {algorithm: fixed_window, limit: 2/m}
`))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := set.Lookup("p")
	t0 := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	q, err := drain.NewMemQueue("p", p.Queue, drain.MemQueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	deferred, err := drain.NewMemQueue("p", admission.DeferredSize(p), drain.MemQueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var got []observed
	line, err := pipeline.New(p, q, deferred, nil, pipeline.Config{
		Passive: true,
		Gate: admission.Config{
			Observe: func(key string, size int, at time.Time, o admission.Outcome) {
				got = append(got, observed{key, size, at, o})
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	g := line.Gate
	ctx := context.Background()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	// Admit, and Reserve then Settle, as the NATS ingress does; the key
	// holds 2, and the limit allows 2 a minute.
	g.Admit(ctx, admission.Request{Key: "a", Payload: make([]byte, 5)}, at(0))
	res := g.Reserve(admission.Request{Key: "b", Payload: make([]byte, 6)}, at(1))
	if res.Step != admission.Block {
		t.Fatalf("Reserve with an admission limit: step %v, want Block", res.Step)
	}
	g.Admit(ctx, admission.Request{Key: "a"}, at(2))
	g.Admit(ctx, admission.Request{Key: "a"}, at(3))  // the limit's third in a minute: limited
	g.Admit(ctx, admission.Request{Key: "a"}, at(61)) // a new minute of the gate's clock
	g.Admit(ctx, admission.Request{Key: ""}, at(62))  // a bad key
	want := []observed{
		{"a", 5, at(0), admission.Accepted},
		{"a", 0, at(2), admission.Accepted},
		{"a", 0, at(3), admission.Limited},
		{"a", 0, at(61), admission.Full},
		{"", 0, at(62), admission.Invalid},
	}
	if !slices.Equal(got, want) {
		t.Errorf("observed %+v,\nwant %+v", got, want)
	}

	// Without an admission limit, Reserve decides alone or hands over to
	// Settle: each is observed once.
	p.Admit = nil
	if err := g.SetPolicy(p); err != nil {
		t.Fatal(err)
	}
	got = nil
	res = g.Reserve(admission.Request{Key: "c", Payload: []byte("x")}, at(70))
	if res.Step != admission.StoreJob || len(got) != 0 {
		t.Fatalf("Reserve: step %v, observed %+v; want StoreJob, nothing yet", res.Step, got)
	}
	rec, err := q.Admit(ctx, res.Job)
	g.Settle(ctx, &res, rec, err)
	res = g.Reserve(admission.Request{Key: "a"}, at(71)) // still full: refused from the store
	rec, err = q.Admit(ctx, res.Job)
	if !errors.Is(err, queue.ErrFull) {
		t.Fatalf("storing a third job of a: %v, want queue.ErrFull", err)
	}
	g.Settle(ctx, &res, rec, err)
	want = []observed{{"c", 1, at(70), admission.Accepted}, {"a", 0, at(71), admission.Full}}
	if !slices.Equal(got, want) {
		t.Errorf("observed %+v,\nwant %+v", got, want)
	}
}
