package answers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/freeport"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/answers"
)

// startNATS runs an in-process nats-server on a free port and returns a
// connection to it for each of n shapers.
func startNATS(t *testing.T, n int) []*nats.Conn {
	t.Helper()
	port, err := freeport.One()
	if err != nil {
		t.Fatal(err)
	}
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	var conns []*nats.Conn
	for range n {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		conns = append(conns, nc)
	}
	return conns
}

type discard struct{}

func (discard) Deliver(context.Context, *drain.Delivery) error { return nil }

// Two shapers drain one queue in two partitions: the holder's View answers
// from its drainer, and the other shaper's View asks it, so that both give
// the answer of the schedule that delivers — not the passive drainer's,
// which knows nothing of the key's last attempt. Once the holder stops
// serving, the other answers from its own drainer.
func TestViewAsksTheHolder(t *testing.T) {
	conns, holder, other, tok, seq := holderRig(t)
	part := drain.PartitionOf(tok, 2)
	served := answers.New(conns[0], "p", holder, answers.Config{})
	asking := answers.New(conns[1], "p", other, answers.Config{})
	if err := served.Serve(part, true); err != nil {
		t.Fatal(err)
	}
	if err := conns[0].Flush(); err != nil {
		t.Fatal(err)
	}
	near := func(what string, got, want time.Duration) {
		t.Helper()
		if d := got - want; d < -time.Second || d > time.Second {
			t.Errorf("%s = %v, want %v (the holder's)", what, got, want)
		}
	}
	now := time.Now()
	want := holder.StartIn(tok, 1, now)
	if want < 59*time.Minute {
		t.Fatalf("holder's StartIn = %v, want about an hour: the rig is wrong", want)
	}
	if own := other.StartIn(tok, 1, now); own > time.Minute {
		t.Fatalf("passive drainer's StartIn = %v, want well under the holder's: the rig is wrong", own)
	}
	near("asking StartIn", asking.StartIn(tok, 1, now), want)
	near("served StartIn", served.StartIn(tok, 1, now), want)
	st, in := asking.Stored(tok, seq, now, 20*time.Millisecond)
	wantSt, wantIn := holder.Stored(tok, seq, now, 20*time.Millisecond)
	near("asking Stored", in, wantIn)
	if st.Queued != wantSt.Queued || st.Waiting != wantSt.Waiting {
		t.Errorf("asking Stored status = %+v, want the holder's %+v", st, wantSt)
	}
	near("asking Key RoomIn", asking.Key(tok, now).RoomIn, holder.Key(tok, now).RoomIn)

	if err := served.Serve(part, false); err != nil {
		t.Fatal(err)
	}
	if err := conns[0].Flush(); err != nil {
		t.Fatal(err)
	}
	if got, own := asking.StartIn(tok, 1, time.Now()), other.StartIn(tok, 1, time.Now()); got > time.Minute {
		t.Errorf("with no holder serving, StartIn = %v, want its own drainer's %v", got, own)
	}
}

// failFirst is a sink that fails every attempt of the key's first job.
type failFirst struct{}

func (failFirst) Deliver(_ context.Context, d *drain.Delivery) error {
	if d.Msg.ID == "j0" {
		return fmt.Errorf("%w: refused", drain.ErrDelivery)
	}
	return nil
}

// A failed job's next try is the holder's answer too: the other shaper's
// passive drainer holds no failed job.
func TestNextTryFromTheHolder(t *testing.T) {
	conns, holder, other, tok, last := holderRigSink(t, failFirst{})
	first := last - 2 // j0
	served := answers.New(conns[0], "p", holder, answers.Config{})
	asking := answers.New(conns[1], "p", other, answers.Config{})
	if err := served.Serve(drain.PartitionOf(tok, 2), true); err != nil {
		t.Fatal(err)
	}
	if err := conns[0].Flush(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	want, held := holder.NextTry(tok, first, now)
	if !held || want < 59*time.Minute {
		t.Fatalf("holder's NextTry of the failed job = %v, %v, want about an hour: the rig is wrong", want, held)
	}
	if _, held := other.NextTry(tok, first, now); held {
		t.Fatal("the passive drainer holds the failed job: the rig is wrong")
	}
	if got, held := asking.NextTry(tok, first, now); !held || got < want-time.Second || got > want+time.Second {
		t.Errorf("asking NextTry = %v, %v, want the holder's %v", got, held, want)
	}
	if _, held := asking.NextTry(tok, last, now); held {
		t.Error("asking NextTry of a fresh job: held, want not (it waits for no retry)")
	}
}

// Whether a key's deliveries find a consumer is the answer of the shaper
// that delivers it, from its sink: the holder says it in the same reply
// as the key's status, another shaper passes it on, and with no holder
// answering nobody knows (the asking shaper's own sink delivers nothing).
func TestKeyConsumerFromTheHolder(t *testing.T) {
	conns := startNATS(t, 2)
	q, err := drain.NewMemQueue("p", 10, drain.MemQueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pace := drain.Pace{Interval: time.Hour}
	holder := drain.NewGroup(q, 2, discard{}, pace, drain.Config{})
	other := drain.NewGroup(q, 2, discard{}, pace, drain.Config{Passive: true})
	defer holder.Stop()
	defer other.Stop()
	ctx := context.Background()
	holder.Advance(ctx, time.Now())
	other.Advance(ctx, time.Now())
	tok, err := queue.EncodeKey("k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Admit(ctx, queue.Job{ID: "j0", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	part := drain.PartitionOf(tok, 2)

	since := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	served := answers.New(conns[0], "p", holder, answers.Config{Waiting: func() time.Time { return since }})
	asking := answers.New(conns[1], "p", other, answers.Config{Waiting: func() time.Time { return since.Add(time.Hour) }})
	if err := served.Serve(part, true); err != nil {
		t.Fatal(err)
	}
	if err := conns[0].Flush(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for name, v := range map[string]*answers.View{"holder": served, "asking": asking} {
		st, got := v.KeyConsumer(tok, now)
		if !got.Equal(since) {
			t.Errorf("%s KeyConsumer waiting since %v, want the holder's %v", name, got, since)
		}
		if want := holder.Key(tok, now); st.Queued != want.Queued {
			t.Errorf("%s KeyConsumer status %+v, want the holder's %+v", name, st, want)
		}
	}

	if err := served.Serve(part, false); err != nil {
		t.Fatal(err)
	}
	if err := conns[0].Flush(); err != nil {
		t.Fatal(err)
	}
	if _, got := asking.KeyConsumer(tok, time.Now()); !got.IsZero() {
		t.Errorf("with no holder answering, KeyConsumer waiting since %v, want unknown (zero)", got)
	}
}

// holderRig is two shapers' Groups of one queue in two partitions, the
// first delivering, at 1/h: key k has three jobs, the first delivered, so
// that the holder's next start is an hour away and the passive drainer's
// at once. It returns three shapers' connections, the Groups, k's token and
// the sequence of its last job.
func holderRig(t *testing.T) (conns []*nats.Conn, holder, other *drain.Group, tok string, seq uint64) {
	t.Helper()
	return holderRigSink(t, discard{})
}

// holderRigSink is holderRig with the holder delivering to sink.
func holderRigSink(t *testing.T, sink drain.Sink) (conns []*nats.Conn, holder, other *drain.Group, tok string, seq uint64) {
	t.Helper()
	conns = startNATS(t, 3)
	q, err := drain.NewMemQueue("p", 10, drain.MemQueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pace := drain.Pace{Interval: time.Hour} // the key's next job is an hour after its first
	holder = drain.NewGroup(q, 2, sink, pace, drain.Config{})
	other = drain.NewGroup(q, 2, discard{}, pace, drain.Config{Passive: true})
	t.Cleanup(holder.Stop)
	t.Cleanup(other.Stop)
	ctx := context.Background()
	holder.Advance(ctx, time.Now())
	other.Advance(ctx, time.Now())
	key := "k"
	if tok, err = queue.EncodeKey(key); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		rec, err := q.Admit(ctx, queue.Job{ID: fmt.Sprint("j", i), Key: key})
		if err != nil {
			t.Fatal(err)
		}
		seq = rec.Seq
	}
	holder.Advance(ctx, time.Now()) // the first job is delivered
	return conns, holder, other, tok, seq
}

// A shaper that released a partition (Leave) answers for it until the next
// holder serves it, not the passive drainers of the others, and stops then
// — or after its bound, when no holder comes.
func TestLeaveAnswersUntilTheNextHolder(t *testing.T) {
	conns, holder, other, tok, _ := holderRig(t)
	part := drain.PartitionOf(tok, 2)
	leaving := answers.New(conns[0], "p", holder, answers.Config{})
	asking := answers.New(conns[1], "p", other, answers.Config{})
	if err := leaving.Serve(part, true); err != nil {
		t.Fatal(err)
	}
	if err := leaving.Leave(part, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := conns[0].Flush(); err != nil {
		t.Fatal(err)
	}
	if got := asking.StartIn(tok, 1, time.Now()); got < 59*time.Minute {
		t.Fatalf("StartIn from a shaper that left the partition = %v, want its answer, about an hour", got)
	}
	if !leaving.Leaving() {
		t.Error("Leaving() = false while no next holder serves the partition")
	}
	// The next holder (its answer here is the passive drainer's, under a
	// minute, which tells the two apart) serves: the one leaving stops.
	next := answers.New(conns[2], "p", other, answers.Config{})
	if err := next.Serve(part, true); err != nil {
		t.Fatal(err)
	}
	// The next holder's word reaches the one leaving a moment later.
	for deadline := time.Now().Add(5 * time.Second); leaving.Leaving(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("Leaving() still true 5 s after the next holder serves the partition")
		}
	}
	for range 20 {
		if got := asking.StartIn(tok, 1, time.Now()); got > time.Minute {
			t.Fatalf("StartIn = %v once the shaper that left stopped answering, want the next holder's (under a minute)", got)
		}
	}

	// No next holder: it stops after its bound.
	if err := next.Serve(part, false); err != nil {
		t.Fatal(err)
	}
	if err := conns[2].Flush(); err != nil {
		t.Fatal(err)
	}
	if err := leaving.Serve(part, true); err != nil {
		t.Fatal(err)
	}
	left := time.Now()
	if err := leaving.Leave(part, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for leaving.Leaving() {
		if time.Since(left) > 5*time.Second {
			t.Fatal("Leaving() still true 5 s after a leave bound to 50 ms")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := time.Since(left); d < 50*time.Millisecond {
		t.Errorf("stopped answering %v after a leave bound to 50 ms, with no next holder", d)
	}
	if err := conns[0].Flush(); err != nil {
		t.Fatal(err)
	}
	if got := asking.StartIn(tok, 1, time.Now()); got > time.Minute {
		t.Errorf("StartIn once a leave bound to 50 ms ended = %v, want the passive drainer's (no holder)", got)
	}
}
