package drain_test

import (
	"context"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// countRaceQueue is a MemQueue whose count of depths runs beside
// submissions: before counting it stores the jobs of before (a producer's
// jobs stored between the drainer's last notice and the count), and it
// adds to the count, above the sequence it reaches, the jobs of after (a
// job stored while the server counts, which JetStream may count with a
// sequence above the last one it reports).
type countRaceQueue struct {
	*drain.MemQueue
	t             *testing.T
	before, after []string // keys
}

func (q *countRaceQueue) TokenDepths(ctx context.Context) (map[string]uint64, uint64, error) {
	for _, key := range q.before {
		admitJob(q.t, q.MemQueue, "", key)
	}
	q.before = nil
	depths, upTo, err := q.MemQueue.TokenDepths(ctx)
	for _, key := range q.after {
		admitJob(q.t, q.MemQueue, "", key)
		depths[tokenOf(q.t, key)]++
	}
	q.after = nil
	return depths, upTo, err
}

// raceRig is a passive drainer of a countRaceQueue at 1/s per key, driven
// on a virtual clock, with when each job started (since t0) by id.
func raceRig(t *testing.T) (t0 time.Time, clock *virtualClock, q *countRaceQueue, d *drain.Drainer, got map[string]time.Duration) {
	t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock, mq := virtualQueue(t, t0)
	q = &countRaceQueue{MemQueue: mq, t: t}
	got = map[string]time.Duration{}
	sink := sinkFunc(func(_ context.Context, dl *drain.Delivery) error {
		got[dl.Msg.ID] = clock.Now().Sub(t0)
		return nil
	})
	d = drain.New(q, sink, drain.Pace{Interval: time.Second}, drain.Config{Clock: clock, Passive: true})
	startDriven(t, t0, d)
	return t0, clock, q, d, got
}

// A passive drainer's count of depths holds a job a producer stored just
// before the count, which Watch reports too: counted once, not twice. Taken
// over with the job counted twice, the key waited for a job that does not
// exist, and every answer about it was a slot late, for good (seen as
// answers 1.5 s early in TestPartitionedAnswers).
func TestResyncCountsAJobStoredMeanwhileOnce(t *testing.T) {
	t0, clock, q, d, _ := raceRig(t)
	ctx := context.Background()
	admitJob(t, q.MemQueue, "a0", "a")
	admitJob(t, q.MemQueue, "a1", "a")
	q.before = []string{"a"}
	d.ResyncNow(ctx)
	if st := d.Key("a", t0); st.Queued != 3 || st.Waiting != 3 {
		t.Fatalf("after a count with a job stored just before it: Key(a) = %+v, want 3 queued and waiting", st)
	}
	d.SetActive(true)
	advanceAll(ctx, d, clock)
	if st := d.Key("a", clock.Now()); st.Queued != 0 {
		t.Errorf("every job delivered: Key(a) = %+v, want none queued", st)
	}
}

// A job counted twice all the same (stored while the server counted, with
// a sequence above the count's) is found out once the key has read every
// job it was told of: it seeks the key's jobs, finds none, and counts
// none, so that the key's next job is answered for at its slot.
func TestDepthCountedTwiceIsFoundOut(t *testing.T) {
	t0, clock, q, d, got := raceRig(t)
	ctx := context.Background()
	admitJob(t, q.MemQueue, "a0", "a")
	q.after = []string{"a"}
	d.ResyncNow(ctx)
	if st := d.Key("a", t0); st.Queued != 3 {
		t.Fatalf("Key(a) = %+v, want 3 queued (one job counted twice, as the race makes it)", st)
	}
	d.SetActive(true)
	advanceAll(ctx, d, clock)
	if st := d.Key("a", clock.Now()); st.Queued != 0 {
		t.Fatalf("every job delivered: Key(a) = %+v, want none queued", st)
	}
	// A new job of the key is answered for, and starts, at once.
	now := clock.Now()
	r, err := q.Admit(ctx, queue.Job{ID: "a2", Key: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, in := d.Stored("a", r.Seq, now, 0); in != 0 {
		t.Errorf("a new job of the key, idle for %v: starts in %v, want 0", now.Sub(t0), in)
	}
	advanceAll(ctx, d, clock)
	if want := now.Sub(t0); got["a2"] != want {
		t.Errorf("the new job started at %v, want %v", got["a2"], want)
	}
}

// A passive drainer's jobs are counted in Queued, not QueuedDraining: its
// count lags the removals of the drainer that delivers them (a tour's
// shapers each showed 24–78 queued of a policy whose keys held 0–1), and
// only the drainer that delivers counts them exactly.
func TestQueuedDrainingIsTheActiveDrainers(t *testing.T) {
	_, clock, q, d, _ := raceRig(t)
	ctx := context.Background()
	admitJob(t, q.MemQueue, "a0", "a")
	admitJob(t, q.MemQueue, "b0", "b")
	if st := d.Stats(); st.Queued != 2 || st.QueuedDraining != 0 {
		t.Errorf("passive: Stats = %+v, want 2 queued, none of them draining here", st)
	}
	d.SetActive(true)
	if st := d.Stats(); st.Queued != 2 || st.QueuedDraining != 2 {
		t.Errorf("active: Stats = %+v, want 2 queued and draining here", st)
	}
	advanceAll(ctx, d, clock)
	if st := d.Stats(); st.Queued != 0 || st.QueuedDraining != 0 {
		t.Errorf("every job delivered: Stats = %+v, want none queued", st)
	}
}
