package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/jobs"
)

// rig is a queue of policy "orders" and a Store on one in-process
// JetStream server.
type rig struct {
	js    jetstream.JetStream
	q     *queue.Queue
	store *jobs.Store
}

func newRig(t *testing.T, cfg jobs.Config) *rig {
	t.Helper()
	ctx := context.Background()
	js, err := jetstream.New(testenv.Connect(t, testenv.NATS(t)))
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.Open(ctx, js, "orders", 100, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := jobs.Open(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{js: js, q: q, store: store}
}

func (r *rig) find(id string) (string, *queue.Queue, uint64, bool) {
	seq, ok := r.q.SeqOf(id)
	return "orders", r.q, seq, ok
}

// admit stores a job of key and returns its receipt.
func (r *rig) admit(t *testing.T, key string) queue.Receipt {
	t.Helper()
	rc, err := r.q.Admit(context.Background(), queue.Job{Key: key, Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

func (r *rig) remove(t *testing.T, seq uint64) {
	t.Helper()
	if err := r.q.Remove(context.Background(), seq); err != nil {
		t.Fatal(err)
	}
}

// status returns the status of id, "404" for ErrNotFound.
func (r *rig) status(t *testing.T, id string) (jobs.Status, *jobs.Record) {
	t.Helper()
	rec, err := r.store.Status(context.Background(), id, r.find)
	if errors.Is(err, jobs.ErrNotFound) {
		return "404", nil
	}
	if err != nil {
		t.Fatalf("Status(%q): %v", id, err)
	}
	return rec.Status, rec
}

// records returns how many messages the records' stream holds.
func (r *rig) records(t *testing.T) uint64 {
	t.Helper()
	st, err := r.js.Stream(context.Background(), jobs.Stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// eventually retries cond for up to 5 s: Put does not wait for JetStream.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 5s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A job named after its place is queued while stored and delivered once
// gone, with no record written for either.
func TestStatusDerivedWithoutRecords(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, jobs.Config{})
	if err := r.store.Mark(ctx, "orders", r.q); err != nil {
		t.Fatal(err)
	}
	a, b := r.admit(t, "k"), r.admit(t, "a.b c")
	if st, rec := r.status(t, a.ID); st != jobs.Queued || rec.Key != "k" || rec.Policy != "orders" || rec.Updated.IsZero() {
		t.Errorf("Status of a stored job = %s %+v, want queued with key k, policy orders and its enqueue time", st, rec)
	}
	r.store.Put(jobs.Record{ID: a.ID, Policy: "orders", Key: "k", Status: jobs.Delivered, Attempts: 1})
	r.remove(t, a.Seq)
	if st, rec := r.status(t, a.ID); st != jobs.Delivered || rec.ID != a.ID || rec.Policy != "orders" {
		t.Errorf("Status of a job gone from its queue = %s %+v, want delivered", st, rec)
	}
	if st, _ := r.status(t, b.ID); st != jobs.Queued {
		t.Errorf("Status of the other job = %s, want queued", st)
	}
	time.Sleep(50 * time.Millisecond) // a Put that was kept would have landed
	if n := r.records(t); n != 1 {
		t.Errorf("records' stream holds %d messages after a first delivery, want 1 (the mark): a derivable record was kept", n)
	}
	epoch, _, _ := queue.ParseJobID(a.ID)
	for _, id := range []string{
		queue.JobID(queue.EpochOf(time.Unix(0, epoch)), b.Seq+1), // never stored
		queue.JobID(queue.EpochOf(time.Unix(0, epoch+1)), a.Seq), // another stream's
		"nosuchjob", "a.b", "*", ">", "",
	} {
		if st, rec := r.status(t, id); st != "404" {
			t.Errorf("Status(%q) = %s %+v, want 404", id, st, rec)
		}
	}
}

// What cannot be derived is kept and wins over what can: failed attempts,
// a dead letter, the delivery of a job that failed before, and every step
// of a deferred job, whose id is its own.
func TestStatusFromRecords(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, jobs.Config{})
	if err := r.store.Mark(ctx, "orders", r.q); err != nil {
		t.Fatal(err)
	}
	failing, dead := r.admit(t, "k"), r.admit(t, "k")
	r.store.Put(jobs.Record{ID: failing.ID, Policy: "orders", Key: "k", Status: jobs.Queued, Attempts: 1, LastError: "503"})
	eventually(t, "the failed attempt recorded", func() bool {
		st, rec := r.status(t, failing.ID)
		return st == jobs.Queued && rec.LastError == "503"
	})
	r.store.Put(jobs.Record{ID: failing.ID, Policy: "orders", Key: "k", Status: jobs.Delivered, Attempts: 2})
	r.remove(t, failing.Seq)
	eventually(t, "the delivery after a failed attempt recorded", func() bool {
		st, rec := r.status(t, failing.ID)
		return st == jobs.Delivered && rec.Attempts == 2 && rec.Key == "k"
	})
	if err := r.store.Write(ctx, jobs.Record{ID: dead.ID, Policy: "orders", Key: "k", Status: jobs.Dead, Reason: "attempts"}); err != nil {
		t.Fatal(err)
	}
	r.remove(t, dead.Seq)
	if st, rec := r.status(t, dead.ID); st != jobs.Dead || rec.Reason != "attempts" {
		t.Errorf("Status of a dead-lettered job = %s %+v, want dead (attempts)", st, rec)
	}
	own := nuid.Next()
	for _, st := range []jobs.Status{jobs.Deferred, jobs.Queued, jobs.Delivered} {
		r.store.Put(jobs.Record{ID: own, Policy: "orders", Key: "k", Status: st, Deferrals: 1})
		eventually(t, "deferred job "+string(st), func() bool { got, _ := r.status(t, own); return got == st })
	}
	if n := r.records(t); n != 4 {
		t.Errorf("records' stream holds %d messages, want 4: the mark and the latest record of each of 3 jobs", n)
	}
}

// Records are bounded by count, the oldest going first; a job delivered
// before the records it needed were dropped is past the horizon (404, not
// a guessed "delivered"), and a new mark brings later jobs back within it.
func TestHorizon(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, jobs.Config{MaxRecords: 10})
	if err := r.store.Mark(ctx, "orders", r.q); err != nil {
		t.Fatal(err)
	}
	early, dead := r.admit(t, "k"), r.admit(t, "k")
	if err := r.store.Write(ctx, jobs.Record{ID: dead.ID, Policy: "orders", Key: "k", Status: jobs.Dead, Reason: "deadline"}); err != nil {
		t.Fatal(err)
	}
	r.remove(t, early.Seq)
	r.remove(t, dead.Seq)
	if st, _ := r.status(t, early.ID); st != jobs.Delivered {
		t.Fatalf("Status of a delivered job within the horizon = %s, want delivered", st)
	}
	for i := range 20 { // failed attempts of other jobs push the dead letter's record out
		if err := r.store.Write(ctx, jobs.Record{ID: fmt.Sprintf("other%d", i), Policy: "orders", Status: jobs.Queued, Attempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.records(t); n > 10 {
		t.Errorf("records' stream holds %d messages, want at most MaxRecords = 10", n)
	}
	for _, job := range []queue.Receipt{early, dead} {
		if st, rec := r.status(t, job.ID); st != "404" {
			t.Errorf("Status of job %d past the horizon = %s %+v, want 404", job.Seq, st, rec)
		}
	}
	if err := r.store.Mark(ctx, "orders", r.q); err != nil {
		t.Fatal(err)
	}
	later := r.admit(t, "k")
	r.remove(t, later.Seq)
	if st, _ := r.status(t, later.ID); st != jobs.Delivered {
		t.Errorf("Status of a job delivered after the new mark = %s, want delivered", st)
	}
	if st, _ := r.status(t, early.ID); st != "404" {
		t.Errorf("Status of the early job after the new mark = %s, want still 404", st)
	}
}

// A queue stream made after a mark is wholly within the horizon.
func TestHorizonOfANewStream(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, jobs.Config{})
	if err := r.store.Mark(ctx, "orders", r.q); err != nil {
		t.Fatal(err)
	}
	if err := r.js.DeleteStream(ctx, r.q.Stream()); err != nil {
		t.Fatal(err)
	}
	q, err := queue.Open(ctx, r.js, "orders", 100, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r.q = q
	job := r.admit(t, "k")
	r.remove(t, job.Seq)
	if st, _ := r.status(t, job.ID); st != jobs.Delivered {
		t.Errorf("Status of a job of a stream made after the mark = %s, want delivered", st)
	}
}

// Without any mark nothing gone can be told: 404.
func TestNoMarkNoDerivedDelivery(t *testing.T) {
	r := newRig(t, jobs.Config{})
	job := r.admit(t, "k")
	r.remove(t, job.Seq)
	if st, _ := r.status(t, job.ID); st != "404" {
		t.Errorf("Status of a gone job with no horizon mark = %s, want 404", st)
	}
}

// KeepHorizon marks every MarkInterval, and two shapers keeping the same
// policy's horizon do not mark it twice as often.
// Two shapers ticking together both read the last mark as old; the one
// that publishes second must see that the first did and write nothing.
func TestMarkRace(t *testing.T) {
	r := newRig(t, jobs.Config{TTL: 96 * time.Second})
	ctx := context.Background()
	for _, first := range []string{"no mark yet", "an old mark"} {
		before := r.records(t)
		err := r.store.MarkRacing(ctx, "orders", r.q, func() {
			if err := r.store.Mark(ctx, "orders", r.q); err != nil {
				t.Fatal(err)
			}
		})
		if err != nil {
			t.Fatalf("%s: the tick that lost the race: %v, want no error", first, err)
		}
		if n := r.records(t) - before; n != 1 {
			t.Errorf("%s: two ticks in one gap wrote %d marks, want 1", first, n)
		}
		time.Sleep(r.store.MarkInterval()) // the mark grows old
	}
}

func TestKeepHorizon(t *testing.T) {
	r := newRig(t, jobs.Config{TTL: 96 * time.Second}) // a mark a second
	if got := r.store.MarkInterval(); got != time.Second {
		t.Fatalf("MarkInterval() = %v, want 1s for a TTL of 96s", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3500*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	const shapers = 4
	for range shapers {
		go func() {
			r.store.KeepHorizon(ctx, "orders", r.q)
			done <- struct{}{}
		}()
	}
	for range shapers {
		<-done
	}
	// A mark is written only while the last one is still the one read,
	// 0.9 s old or more: at most 4 in 3.5 s, however the ticks fall.
	if n := r.records(t); n < 2 || n > 5 {
		t.Errorf("%d KeepHorizon over 3.5 s with a 1 s interval wrote %d marks, want 2 to 5 (about one a second; each alone would write 3 or 4)", shapers, n)
	}
	job := r.admit(t, "k")
	r.remove(t, job.Seq)
	if st, _ := r.status(t, job.ID); st != jobs.Delivered {
		t.Errorf("Status of a job admitted after the last mark = %s, want delivered", st)
	}
}

// A record read right after this shaper put it is found: Put does not wait
// for JetStream, and a producer answered 429 with a deferred job's id may
// ask for it at once.
func TestRecordReadRightAfterPut(t *testing.T) {
	r := newRig(t, jobs.Config{})
	ctx := context.Background()
	for i := range 100 {
		id := fmt.Sprintf("deferred-%d", i)
		r.store.Put(jobs.Record{ID: id, Policy: "orders", Key: "k", Status: jobs.Deferred})
		if got, err := r.store.Get(ctx, id); err != nil || got.Status != jobs.Deferred {
			t.Fatalf("Get(%s) right after Put = %+v, %v; want it deferred", id, got, err)
		}
	}
}
