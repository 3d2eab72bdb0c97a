package drain_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
)

// keyedReads is a MemQueue whose reads of a key's jobs take that key's
// delay (or rtt): some keys' heads come back later than others'.
type keyedReads struct {
	*drain.MemQueue
	rtt   time.Duration
	delay map[string]time.Duration // by key token
}

func (q *keyedReads) Get(ctx context.Context, token string, seq uint64) (*queue.Msg, error) {
	d, ok := q.delay[token]
	if !ok {
		d = q.rtt
	}
	elapse(d)
	return q.MemQueue.Get(ctx, token, seq)
}

// startSlowK1 starts a drainer at pace on a MemQueue of 3 jobs a key
// whose reads take 2 ms, and key k1's 40 ms.
func startSlowK1(t *testing.T, pace drain.Pace) (*drain.MemQueue, *drain.Drainer, *recorder) {
	t.Helper()
	mq, err := drain.NewMemQueue("p", 3, drain.MemQueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	k1, _ := queue.EncodeKey("k1")
	q := &keyedReads{MemQueue: mq, rtt: 2 * time.Millisecond, delay: map[string]time.Duration{k1: 40 * time.Millisecond}}
	sink := newRecorder()
	d := drain.New(q, sink, pace, drain.Config{})
	t.Cleanup(d.Stop)
	d.Start(t.Context())
	return mq, d, sink
}

// Under a binding total cap, new keys take the cap's slots in the order
// their jobs came, as the answers given to their producers say (Stored),
// also when a later key's first head is read before an earlier one's. The
// shaper's TestAnswersFromTheSchedule failed about once in a dozen runs on
// a busy machine when the cap's slots went in the order the reads came
// back.
func TestCapSlotsInArrivalOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const keys, total = 6, 500 * time.Millisecond
		mq, d, sink := startSlowK1(t, drain.Pace{Interval: 100 * time.Millisecond, Total: total})
		start := time.Now()
		promised := map[string]time.Duration{}
		for round := range 2 {
			for i := range keys {
				key := fmt.Sprintf("k%d", i)
				id := fmt.Sprintf("%s-%d", key, round)
				rc, err := mq.Admit(context.Background(), queue.Job{ID: id, Key: key})
				if err != nil {
					t.Fatal(err)
				}
				synctest.Wait() // the drainer saw the job and started what it starts
				token, _ := queue.EncodeKey(key)
				_, in := d.Stored(token, rc.Seq, time.Now(), 0)
				promised[id] = time.Since(start) + in
			}
		}
		ds := sink.wait(t, 2*keys, time.Minute)
		for _, got := range ds {
			at := got.at.Sub(start)
			t.Logf("%s: started %v, promised %v", got.id, at, promised[got.id])
			if off := at - promised[got.id]; off < -total/10 || off > total/10 {
				t.Errorf("%s started at %v, promised %v to its producer", got.id, at, promised[got.id])
			}
		}
	})
}

// A slot reserved under the cap for a read that finds no job (another
// drainer removed it) is given back: the next key takes it.
func TestCapSlotGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const total = 500 * time.Millisecond
		mq, _, sink := startSlowK1(t, drain.Pace{Interval: 100 * time.Millisecond, Total: total})
		start := time.Now()
		for _, key := range []string{"k0", "k1"} {
			rc, err := mq.Admit(context.Background(), queue.Job{ID: key, Key: key})
			if err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			if key == "k1" {
				if err := mq.Remove(context.Background(), rc.Seq); err != nil {
					t.Fatal(err)
				}
			}
		}
		elapse(100 * time.Millisecond) // k1's read found nothing
		if _, err := mq.Admit(context.Background(), queue.Job{ID: "k2", Key: "k2"}); err != nil {
			t.Fatal(err)
		}
		ds := sink.wait(t, 2, time.Minute)
		if got := ds[1].at.Sub(start); ds[1].id != "k2" || got != total {
			t.Errorf("second delivery %s at %v, want k2 at %v: the slot k1 reserved was not given back", ds[1].id, got, total)
		}
	})
}

// A slot reserved for a read in flight is taken again under a new pace:
// the cap set while the read runs spaces the key's delivery from the last.
func TestCapSlotOfReadReplanned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pace := drain.Pace{Interval: 100 * time.Millisecond, Total: 500 * time.Millisecond}
		mq, d, sink := startSlowK1(t, pace)
		for _, key := range []string{"k0", "k1"} {
			if _, err := mq.Admit(context.Background(), queue.Job{ID: key, Key: key}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		elapse(10 * time.Millisecond) // k0 delivered; k1's read, its slot reserved, runs
		pace.Total = 2 * time.Second
		d.SetPace(pace)
		ds := sink.wait(t, 2, time.Minute)
		if gap := ds[1].at.Sub(ds[0].at); gap < 1900*time.Millisecond {
			t.Errorf("k1 delivered %v after k0 under a total cap set to 2s, want about 2s", gap)
		}
	})
}

// A job delivered before its producer is answered is answered as started
// (0), not with the start of the key's next job.
func TestStoredAfterDelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mq, d, sink := startSlowK1(t, drain.Pace{Interval: 250 * time.Millisecond})
		rc, err := mq.Admit(context.Background(), queue.Job{ID: "j", Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		sink.wait(t, 1, time.Minute)
		synctest.Wait() // the step completed: the job delivered, its slot held
		token, _ := queue.EncodeKey("k")
		if _, in := d.Stored(token, rc.Seq, time.Now(), 0); in != 0 {
			t.Errorf("Stored of the job delivered = start in %v, want 0", in)
		}
	})
}
