package client_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper/client"
)

// The listings page: a page holds at most its limit and names the next;
// the All… iterators follow the pages to the last; a bad limit or cursor
// is ErrBadRequest. The pages are the shaper's JSON, field for field.
func TestListingPages(t *testing.T) {
	e := start(t, testPolicies)
	ctx := t.Context()
	mustSubmit(t, e.c, "later", "k", client.OutcomeAccepted) // nobody consumes: it stays
	var ids []string
	for range 5 {
		ids = append(ids, mustSubmit(t, e.c, "later", "k", client.OutcomeDeferred).ID)
	}
	mustSubmit(t, e.c, "later", "other", client.OutcomeAccepted)
	mustSubmit(t, e.c, "later", "other", client.OutcomeDeferred)

	p, err := e.c.DeferredJobs(ctx, client.DeferredFilter{Policy: "later", Key: "k", Limit: 2})
	if err != nil || len(p.Deferred) != 2 || p.Next == "" || p.Deferred[0].ID != ids[0] || p.Deferred[0].Key != "k" {
		t.Fatalf("DeferredJobs(later, k, limit 2) = %+v, %v; want the first 2 and a next", p, err)
	}
	var got []string
	for j, err := range e.c.AllDeferredJobs(ctx, client.DeferredFilter{Policy: "later", Key: "k", Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, j.ID)
	}
	if !slices.Equal(got, ids) {
		t.Errorf("AllDeferredJobs(later, k, limit 2) = %v, want %v", got, ids)
	}
	n := 0
	for _, err := range e.c.AllDeferredJobs(ctx, client.DeferredFilter{Limit: 1}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 6 {
		t.Errorf("AllDeferredJobs of every policy, a page of 1: %d, want 6", n)
	}
	roundTrip[client.DeferredPage](t, "deferred jobs", raw(t, "GET", e.base+"/v1/deferred?policy=later&limit=3", "", 200))

	// Stop early: the iterator asks for no further page.
	for range e.c.AllDeferredJobs(ctx, client.DeferredFilter{Limit: 1}) {
		break
	}

	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"DeferredJobs of an unknown policy", second(e.c.DeferredJobs(ctx, client.DeferredFilter{Policy: "nope"})), client.ErrUnknownPolicy},
		{"DeferredJobs with a limit of 5000", second(e.c.DeferredJobs(ctx, client.DeferredFilter{Limit: 5000})), client.ErrBadRequest},
		{"DeferredJobs after a bad cursor", second(e.c.DeferredJobs(ctx, client.DeferredFilter{After: "!"})), client.ErrBadRequest},
		{"DeadLetterPage with a limit of 5000", second(e.c.DeadLetterPage(ctx, client.DeadFilter{Limit: 5000})), client.ErrBadRequest},
		{"DeadLetterPage after a bad cursor", second(e.c.DeadLetterPage(ctx, client.DeadFilter{After: "!"})), client.ErrBadRequest},
	} {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	for _, err := range e.c.AllDeadLetters(ctx, client.DeadFilter{Limit: 5000}) {
		if !errors.Is(err, client.ErrBadRequest) {
			t.Errorf("AllDeadLetters with a limit of 5000 yields %v, want ErrBadRequest", err)
		}
	}
}

// Dead letters page like deferred jobs.
func TestDeadLetterPages(t *testing.T) {
	e := startDeadHooks(t, "k0", "k1", "k2", "k3", "k4")
	ctx := t.Context()
	var all []client.DeadLetter
	for deadline := time.Now().Add(20 * time.Second); len(all) < 5; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("AllDeadLetters = %d letters after 20s, want 5", len(all))
		}
		all = all[:0]
		for d, err := range e.c.AllDeadLetters(ctx, client.DeadFilter{Policy: "hooks", Limit: 2}) {
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, d)
		}
	}
	for i := 1; i < len(all); i++ {
		if all[i].Seq <= all[i-1].Seq {
			t.Fatalf("AllDeadLetters out of order: %+v", all)
		}
	}
	p, err := e.c.DeadLetterPage(ctx, client.DeadFilter{Policy: "hooks", Limit: 4})
	if err != nil || len(p.Dead) != 4 || p.Next == "" {
		t.Fatalf("DeadLetterPage(limit 4) = %d letters, next %q, %v; want 4 and a next", len(p.Dead), p.Next, err)
	}
	last, err := e.c.DeadLetterPage(ctx, client.DeadFilter{Policy: "hooks", Limit: 4, After: p.Next})
	if err != nil || len(last.Dead) != 1 || last.Next != "" || last.Dead[0].Seq != all[4].Seq {
		t.Errorf("the page after it = %+v, %v; want the fifth letter and no next", last, err)
	}
	roundTrip[client.DeadPage](t, "dead letters", raw(t, "GET", e.base+"/v1/dead?policy=hooks&limit=2", "", 200))
}
