package drain_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/drain"
	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/queue"
)

// admissionQueue is the surface *queue.Queue and drain.MemQueue share
// beyond drain.Queue, so that admission can run over either: the compiler
// checks that both have it, with the same shapes.
type admissionQueue interface {
	drain.Queue
	Admit(ctx context.Context, job queue.Job) (queue.Receipt, error)
	Size() int
	Limit() int
	MaxPayload() int
	Resize(ctx context.Context, size int) error
	Depths(ctx context.Context) (map[string]uint64, error)
}

var (
	_ admissionQueue = (*queue.Queue)(nil)
	_ admissionQueue = (*drain.MemQueue)(nil)
)

// TestQueueContract runs one contract over every drain.Queue: what the
// Drainer relies on, and the admission rule both enforce.
func TestQueueContract(t *testing.T) {
	impls := []struct {
		name string
		open func(t *testing.T, size int) admissionQueue
	}{
		{"MemQueue", func(t *testing.T, size int) admissionQueue {
			q, err := drain.NewMemQueue("p", size, drain.MemQueueConfig{MaxPayload: 1 << 10})
			if err != nil {
				t.Fatal(err)
			}
			return q
		}},
		{"JetStream", func(t *testing.T, size int) admissionQueue {
			js, err := jetstream.New(testenv.Connect(t, testenv.NATS(t)))
			if err != nil {
				t.Fatal(err)
			}
			q, err := queue.Open(context.Background(), js, "p", size, queue.Config{MaxPayload: 1 << 10})
			if err != nil {
				t.Fatal(err)
			}
			return q
		}},
	}
	for _, impl := range impls {
		t.Run(impl.name, func(t *testing.T) {
			t.Run("admission", func(t *testing.T) { contractAdmission(t, impl.open(t, 3)) })
			t.Run("watch and read", func(t *testing.T) { contractWatchAndRead(t, impl.open(t, 10)) })
			t.Run("resize", func(t *testing.T) { contractResize(t, impl.open(t, 3)) })
		})
	}
	if _, err := drain.NewMemQueue("p", 0, drain.MemQueueConfig{}); err == nil {
		t.Errorf("NewMemQueue of size 0 = nil error, want one")
	}
}

// A key holds at most Limit jobs, atomically; other keys are not touched;
// bad input is refused with the package's sentinels.
func contractAdmission(t *testing.T, q admissionQueue) {
	ctx := context.Background()
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		stored int
		full   int
	)
	for i := range 10 {
		wg.Go(func() {
			_, err := q.Admit(ctx, queue.Job{Key: "k", Payload: []byte(fmt.Sprint(i))})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				stored++
			case errors.Is(err, queue.ErrFull):
				full++
			default:
				t.Errorf("Admit = %v", err)
			}
		})
	}
	wg.Wait()
	if stored != 3 || full != 7 {
		t.Errorf("10 at once against a queue of 3: %d stored, %d full; want 3, 7", stored, full)
	}
	if _, err := q.Admit(ctx, queue.Job{Key: "other key"}); err != nil {
		t.Errorf("Admit of another key = %v, want room", err)
	}
	if _, err := q.Admit(ctx, queue.Job{Key: "big", Payload: make([]byte, q.MaxPayload()+1)}); !errors.Is(err, queue.ErrTooLarge) {
		t.Errorf("Admit of %d bytes = %v, want ErrTooLarge", q.MaxPayload()+1, err)
	}
	if _, err := q.Admit(ctx, queue.Job{Key: ""}); !errors.Is(err, queue.ErrBadKey) {
		t.Errorf("Admit of an empty key = %v, want ErrBadKey", err)
	}
	depths, err := q.Depths(ctx)
	if err != nil || depths["k"] != 3 || depths["other key"] != 1 || len(depths) != 2 {
		t.Errorf("Depths() = %v, %v; want k: 3, other key: 1", depths, err)
	}
	tokens, _, err := q.TokenDepths(ctx)
	other, _ := queue.EncodeKey("other key")
	if err != nil || tokens["k"] != 3 || tokens[other] != 1 {
		t.Errorf("TokenDepths() = %v, %v; want k: 3, %s: 1", tokens, err, other)
	}
}

// Watch reports every job, stored before it started and after, in order,
// once; Get reads a job by sequence for its own key only; Remove frees it,
// twice without an error; Next finds a key's first job from a sequence on.
func contractWatchAndRead(t *testing.T, q admissionQueue) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var receipts []queue.Receipt
	admit := func(key string) {
		rec, err := q.Admit(ctx, queue.Job{Key: key, Payload: []byte(key), Attempt: 0})
		if err != nil {
			t.Fatalf("Admit(%s) = %v", key, err)
		}
		receipts = append(receipts, rec)
	}
	admit("a")
	admit("b")
	notices := make(chan queue.Notice, 100)
	watchDone := make(chan error, 1)
	go func() { watchDone <- q.Watch(ctx, func(n queue.Notice) { notices <- n }) }()
	admit("a")
	admit("weird key/é")
	var got []queue.Notice
	deadline := time.After(10 * time.Second)
	for len(got) < len(receipts) {
		select {
		case n := <-notices:
			got = append(got, n)
		case <-deadline:
			t.Fatalf("Watch reported %v, want the %d jobs stored", got, len(receipts))
		}
	}
	weird, _ := queue.EncodeKey("weird key/é")
	tokens := []string{"a", "b", "a", weird}
	for i, n := range got {
		if n.Seq != receipts[i].Seq || n.Token != tokens[i] {
			t.Errorf("notice %d = %+v, want {%s %d}", i, n, tokens[i], receipts[i].Seq)
		}
	}
	if !slices.IsSortedFunc(got, func(a, b queue.Notice) int { return int(a.Seq) - int(b.Seq) }) {
		t.Errorf("notices out of order: %v", got)
	}

	last, err := q.LastSeq(ctx)
	if err != nil || last != receipts[3].Seq {
		t.Errorf("LastSeq() = %d, %v; want %d", last, err, receipts[3].Seq)
	}
	m, err := q.Get(ctx, weird, receipts[3].Seq)
	if err != nil {
		t.Fatalf("Get(%s, %d) = %v", weird, receipts[3].Seq, err)
	}
	if m.Key != "weird key/é" || m.Token != weird || m.ID != receipts[3].ID || m.Attempt != 1 || string(m.Payload) != "weird key/é" || m.EnqueuedAt.IsZero() {
		t.Errorf("Get = %+v, want the job as stored, with Attempt 1 and EnqueuedAt set", m)
	}
	if m.Headers(q.Policy()).Get(queue.HeaderPolicy) != "p" {
		t.Errorf("Headers() = %v, want the policy", m.Headers(q.Policy()))
	}
	if _, err := q.Get(ctx, "b", receipts[0].Seq); !errors.Is(err, queue.ErrEmpty) {
		t.Errorf("Get of a's job as b's = %v, want ErrEmpty", err)
	}
	for range 2 {
		if err := q.Remove(ctx, receipts[0].Seq); err != nil {
			t.Errorf("Remove(%d) = %v, want nil (also when gone)", receipts[0].Seq, err)
		}
	}
	if _, err := q.Get(ctx, "a", receipts[0].Seq); !errors.Is(err, queue.ErrEmpty) {
		t.Errorf("Get of a removed job = %v, want ErrEmpty", err)
	}
	if tokens, _, _ := q.TokenDepths(ctx); tokens["a"] != 1 {
		t.Errorf("TokenDepths()[a] = %d after a removal, want 1", tokens["a"])
	}
	// Next finds a key's first job stored from a sequence on, past other
	// keys' jobs and removed ones.
	for _, from := range []uint64{0, receipts[0].Seq, receipts[2].Seq} {
		if m, err := q.Next(ctx, "a", from); err != nil || m.Seq != receipts[2].Seq || string(m.Payload) != "a" {
			t.Errorf("Next(a, %d) = %+v, %v; want the job at %d", from, m, err, receipts[2].Seq)
		}
	}
	if _, err := q.Next(ctx, "a", receipts[2].Seq+1); !errors.Is(err, queue.ErrEmpty) {
		t.Errorf("Next(a) past its last job = %v, want ErrEmpty", err)
	}
	if _, err := q.Next(ctx, "none", 0); !errors.Is(err, queue.ErrEmpty) {
		t.Errorf("Next of a key without jobs = %v, want ErrEmpty", err)
	}
	cancel()
	select {
	case err := <-watchDone:
		if err != nil {
			t.Errorf("Watch = %v when ctx ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("Watch did not return when ctx ended")
	}
}

// A larger size raises the limit at once; a smaller one only lowers Size.
func contractResize(t *testing.T, q admissionQueue) {
	ctx := context.Background()
	if err := q.Resize(ctx, 5); err != nil || q.Size() != 5 || q.Limit() != 5 {
		t.Errorf("Resize(5) = %v: size %d, limit %d; want 5, 5", err, q.Size(), q.Limit())
	}
	if err := q.Resize(ctx, 2); err != nil || q.Size() != 2 || q.Limit() != 5 {
		t.Errorf("Resize(2) = %v: size %d, limit %d; want 2, 5", err, q.Size(), q.Limit())
	}
	if err := q.Resize(ctx, 0); err == nil {
		t.Errorf("Resize(0) = nil, want an error")
	}
	for i := range 5 {
		if _, err := q.Admit(ctx, queue.Job{Key: "k"}); err != nil {
			t.Fatalf("Admit #%d under the limit of 5 = %v", i, err)
		}
	}
	if _, err := q.Admit(ctx, queue.Job{Key: "k"}); !errors.Is(err, queue.ErrFull) {
		t.Errorf("Admit past the limit = %v, want ErrFull", err)
	}
}
