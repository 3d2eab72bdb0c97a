package queue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/queue"
)

// A job admitted without an id gets the id of where it is stored, stores
// nothing that can be derived, and reads back whole.
func TestAdmitNamesJobAfterItsPlace(t *testing.T) {
	ctx := context.Background()
	q, js := open(t, 5)
	before := time.Now()
	h := nats.Header{}
	h.Set(queue.HeaderTrace, "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01")
	r, err := q.Admit(ctx, queue.Job{Key: "a.b c", Payload: []byte("p"), Header: h})
	if err != nil {
		t.Fatal(err)
	}
	if r.ID != q.JobID(r.Seq) {
		t.Errorf("Receipt.ID = %q, want JobID(%d) = %q", r.ID, r.Seq, q.JobID(r.Seq))
	}
	if seq, ok := q.SeqOf(r.ID); !ok || seq != r.Seq {
		t.Errorf("SeqOf(%q) = %d, %v; want %d, true", r.ID, seq, ok, r.Seq)
	}
	st, _ := js.Stream(ctx, q.Stream())
	raw, err := st.GetMsg(ctx, r.Seq)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{queue.HeaderJobID, queue.HeaderKey, queue.HeaderPolicy, queue.HeaderEnqueuedAt, queue.HeaderAttempt, "Nats-Msg-Id"} {
		if v := raw.Header.Get(name); v != "" {
			t.Errorf("stored header %s = %q: derivable, should not be stored", name, v)
		}
	}
	m, err := q.Lookup(ctx, r.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != r.ID || m.Key != "a.b c" || m.Attempt != 1 || string(m.Payload) != "p" || m.EnqueuedAt.Before(before.Add(-time.Second)) {
		t.Errorf("Lookup = id %q key %q attempt %d payload %q enqueued %v", m.ID, m.Key, m.Attempt, m.Payload, m.EnqueuedAt)
	}
	out := m.Headers("orders")
	want := map[string]string{queue.HeaderJobID: r.ID, queue.HeaderKey: "a.b c", queue.HeaderPolicy: "orders", queue.HeaderAttempt: "1", queue.HeaderTrace: h.Get(queue.HeaderTrace)}
	for k, v := range want {
		if out.Get(k) != v {
			t.Errorf("Headers()[%s] = %q, want %q", k, out.Get(k), v)
		}
	}
	if at, err := time.Parse(time.RFC3339Nano, out.Get(queue.HeaderEnqueuedAt)); err != nil || !at.Equal(m.EnqueuedAt) {
		t.Errorf("Headers()[%s] = %q, want %v", queue.HeaderEnqueuedAt, out.Get(queue.HeaderEnqueuedAt), m.EnqueuedAt)
	}
	if _, err := q.Lookup(ctx, r.Seq+1); err == nil {
		t.Errorf("Lookup past the last job: no error")
	}
}

// Dedupe makes a resubmission a duplicate that gets the first job's id;
// explicit ids, enqueue times and attempts are stored and read back.
func TestAdmitDedupeAndExplicitFields(t *testing.T) {
	ctx := context.Background()
	q, _ := open(t, 5)
	r1, err := q.Admit(ctx, queue.Job{Dedupe: "i-order-1", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := q.Admit(ctx, queue.Job{Dedupe: "i-order-1", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if !r2.Duplicate || r2.ID != r1.ID || r2.Seq != r1.Seq {
		t.Errorf("resubmission = %+v, want a duplicate of %+v", r2, r1)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	r3, err := q.Admit(ctx, queue.Job{ID: "deferred-1", Key: "k", EnqueuedAt: at, Attempt: 3})
	if err != nil {
		t.Fatal(err)
	}
	if r3.ID != "deferred-1" {
		t.Errorf("Receipt.ID = %q, want the job's own id", r3.ID)
	}
	if _, ok := q.SeqOf(r3.ID); ok {
		t.Errorf("SeqOf(%q) = ok for an id the queue did not make", r3.ID)
	}
	m, err := q.Lookup(ctx, r3.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "deferred-1" || !m.EnqueuedAt.Equal(at) || m.Attempt != 3 {
		t.Errorf("Lookup = id %q enqueued %v attempt %d; want deferred-1, %v, 3", m.ID, m.EnqueuedAt, m.Attempt, at)
	}
}

// Ids name their stream: a stream deleted and created again makes new ids,
// and the old ones are not taken for its jobs.
func TestJobIDsSurviveStreamRecreation(t *testing.T) {
	ctx := context.Background()
	q1, js := open(t, 5)
	r1, err := q1.Admit(ctx, queue.Job{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, q1.Stream()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	q2, err := queue.Open(ctx, js, "orders", 5, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := q2.Admit(ctx, queue.Job{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if r2.Seq != r1.Seq || r2.ID == r1.ID {
		t.Errorf("after re-creation: seq %d id %q, before seq %d id %q: want the same seq and another id", r2.Seq, r2.ID, r1.Seq, r1.ID)
	}
	if _, ok := q2.SeqOf(r1.ID); ok {
		t.Errorf("the new stream's queue takes the old stream's id %q", r1.ID)
	}
	info, err := js.Stream(ctx, q2.Stream())
	if err != nil {
		t.Fatal(err)
	}
	if got := queue.JobID(queue.EpochOf(info.CachedInfo().Created), r2.Seq); got != r2.ID {
		t.Errorf("JobID(EpochOf(created), seq) = %q, want %q", got, r2.ID)
	}
	// The first Queue, still running on the old stream's epoch, takes the
	// new one at its next look at the stream's state.
	if _, err := q1.LastSeq(ctx); err != nil {
		t.Fatal(err)
	}
	r3, err := q1.Admit(ctx, queue.Job{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if r3.ID != q2.JobID(r3.Seq) {
		t.Errorf("old Queue after LastSeq names seq %d %q, want the new stream's %q", r3.Seq, r3.ID, q2.JobID(r3.Seq))
	}
}

// FuzzSeqOf: SeqOf parses ids that come from GET /v1/jobs/{id}. It accepts
// exactly the ids JobID makes (so no two ids name one job), and nothing
// else panics.
func FuzzSeqOf(f *testing.F) {
	q, _ := open(f, 1)
	for _, id := range []string{q.JobID(1), q.JobID(1 << 63), q.JobID(^uint64(0)), "", "-", q.JobID(1) + "0", "x-1", "Xh7PqQn0d8Yc5y2Tn5rFYb", "i0123456789abcdef01234567"} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		seq, ok := q.SeqOf(id)
		if ok && (seq == 0 || q.JobID(seq) != id) {
			t.Errorf("SeqOf(%q) = %d, but JobID(%d) = %q", id, seq, seq, q.JobID(seq))
		}
	})
}

// AdmitAsync answers as Admit does, once Wait is called.
func TestAdmitAsync(t *testing.T) {
	ctx := context.Background()
	s := testenv.NATS(t)
	js, err := jetstream.New(testenv.Connect(t, s), jetstream.WithPublishAsyncTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.Open(ctx, js, "orders", 2, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var ps []*queue.Pending
	for range 3 {
		ps = append(ps, q.AdmitAsync(queue.Job{Key: "k", Payload: []byte("x")}))
	}
	ps = append(ps, q.AdmitAsync(queue.Job{Key: "k2", Dedupe: "d1"}), q.AdmitAsync(queue.Job{Key: "k2", Dedupe: "d1"}))
	for i, p := range ps[:2] {
		r, err := p.Wait()
		if err != nil || r.ID != q.JobID(r.Seq) {
			t.Errorf("job %d: %+v, %v; want a receipt named after its sequence", i, r, err)
		}
	}
	if _, err := ps[2].Wait(); !errors.Is(err, queue.ErrFull) {
		t.Errorf("third job of a key of 2 = %v, want ErrFull", err)
	}
	r1, err1 := ps[3].Wait()
	r2, err2 := ps[4].Wait()
	if err1 != nil || err2 != nil || !r2.Duplicate || r2.ID != r1.ID {
		t.Errorf("resubmission = %+v, %v after %+v, %v; want a duplicate with the same id", r2, err2, r1, err1)
	}
	if _, err := q.AdmitAsync(queue.Job{Key: strings.Repeat("k", 300)}).Wait(); !errors.Is(err, queue.ErrBadKey) {
		t.Errorf("300-byte key = %v, want ErrBadKey", err)
	}
	if _, err := q.AdmitAsync(queue.Job{Key: "k3", Payload: make([]byte, 2<<20)}).Wait(); !errors.Is(err, queue.ErrTooLarge) {
		t.Errorf("2 MiB payload = %v, want ErrTooLarge", err)
	}
}

// ParseJobID takes back exactly what JobID made, and nothing else: an id of
// its own (a NUID, an Idempotency-Key's hash) is not named by a sequence.
func TestParseJobID(t *testing.T) {
	created := time.Date(2026, 11, 23, 10, 0, 0, 123, time.UTC)
	id := queue.JobID(queue.EpochOf(created), 12345)
	if epoch, seq, ok := queue.ParseJobID(id); !ok || epoch != created.UnixNano() || seq != 12345 {
		t.Errorf("ParseJobID(%q) = %d, %d, %v; want %d, 12345, true", id, epoch, seq, ok, created.UnixNano())
	}
	for _, bad := range []string{"", "-", "x", id + "-1", "-1", "abc-", "abc-0", "0-1", "abc-01", "ABC-1", "Xh7PqQn0d8Yc5y2Tn5rFYb", "i0123456789abcdef01234567", "zzzzzzzzzzzzzzz-1"} {
		if epoch, seq, ok := queue.ParseJobID(bad); ok {
			t.Errorf("ParseJobID(%q) = %d, %d, true; want false", bad, epoch, seq)
		}
	}
}
