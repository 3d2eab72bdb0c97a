package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/queue"
)

func open(t testing.TB, size int) (*queue.Queue, jetstream.JetStream) {
	t.Helper()
	return openWith(t, "orders", size, queue.Config{})
}

// openWith opens the queue of policy on a NATS server of its own.
func openWith(t testing.TB, policy string, size int, cfg queue.Config) (*queue.Queue, jetstream.JetStream) {
	t.Helper()
	s := testenv.NATS(t)
	js, err := jetstream.New(testenv.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.Open(context.Background(), js, policy, size, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return q, js
}

func TestAdmitFullAtSize(t *testing.T) {
	ctx := context.Background()
	q, _ := open(t, 10)
	var (
		mu       sync.Mutex
		ok, full int
		wg       sync.WaitGroup
	)
	for i := range 50 {
		wg.Go(func() {
			_, err := q.Admit(ctx, queue.Job{ID: fmt.Sprint("j", i), Key: "k1", Payload: []byte("x")})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, queue.ErrFull):
				full++
			default:
				t.Errorf("Admit = %v", err)
			}
		})
	}
	wg.Wait()
	if ok != 10 || full != 40 {
		t.Errorf("50 admissions: %d stored, %d full; want 10, 40", ok, full)
	}
	// Another key is independent.
	if _, err := q.Admit(ctx, queue.Job{ID: "other", Key: "k2"}); err != nil {
		t.Errorf("Admit(k2) = %v, want ok", err)
	}
	// Removing the head frees exactly one slot.
	tok, _ := queue.EncodeKey("k1")
	m, err := q.Next(ctx, tok, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Remove(ctx, m.Seq); err != nil {
		t.Fatal(err)
	}
	if err := q.Remove(ctx, m.Seq); err != nil {
		t.Errorf("second Remove = %v, want nil", err)
	}
	if _, err := q.Admit(ctx, queue.Job{ID: "again1", Key: "k1"}); err != nil {
		t.Errorf("Admit after Remove = %v, want ok", err)
	}
	if _, err := q.Admit(ctx, queue.Job{ID: "again2", Key: "k1"}); !errors.Is(err, queue.ErrFull) {
		t.Errorf("Admit past size = %v, want ErrFull", err)
	}
}

func TestAdmitDuplicateID(t *testing.T) {
	ctx := context.Background()
	q, _ := open(t, 5)
	r1, err := q.Admit(ctx, queue.Job{ID: "same", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := q.Admit(ctx, queue.Job{ID: "same", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if !r2.Duplicate || r2.Seq != r1.Seq {
		t.Errorf("second Admit = %+v, want Duplicate of seq %d", r2, r1.Seq)
	}
	d, err := q.Depths(ctx)
	if err != nil || d["k"] != 1 {
		t.Errorf("Depths = %v, %v, want k:1", d, err)
	}
}

func TestNextFIFOAndHostileKeys(t *testing.T) {
	ctx := context.Background()
	q, _ := open(t, 100)
	keys := []string{"a.b", "*", ">", "a.>", "with space", "ключ", "$SYS", "a", "~YQ", strings.Repeat("z", 256)}
	for i := range 3 {
		for j, k := range keys {
			if _, err := q.Admit(ctx, queue.Job{ID: fmt.Sprintf("k%d-%d", j, i), Key: k, Payload: []byte(fmt.Sprint(i))}); err != nil {
				t.Fatalf("Admit(%q) = %v", k, err)
			}
		}
	}
	d, err := q.Depths(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for j, k := range keys {
		if d[k] != 3 {
			t.Errorf("depth of %q = %d, want 3 (depths %v)", k, d[k], d)
		}
		tok, _ := queue.EncodeKey(k)
		var from uint64
		for i := range 3 {
			m, err := q.Next(ctx, tok, from)
			if err != nil {
				t.Fatalf("Next(%q) = %v", k, err)
			}
			if m.Key != k || string(m.Payload) != fmt.Sprint(i) || m.ID != fmt.Sprintf("k%d-%d", j, i) || m.Undecodable != "" {
				t.Errorf("Next(%q) #%d = key %q payload %q id %q undecodable %q", k, i, m.Key, m.Payload, m.ID, m.Undecodable)
			}
			from = m.Seq + 1
		}
		if _, err := q.Next(ctx, tok, from); !errors.Is(err, queue.ErrEmpty) {
			t.Errorf("Next past the tail of %q = %v, want ErrEmpty", k, err)
		}
	}
}

func TestAdmitRejects(t *testing.T) {
	ctx := context.Background()
	q, _ := open(t, 5)
	if _, err := q.Admit(ctx, queue.Job{ID: "big", Key: "k", Payload: make([]byte, 4<<20)}); !errors.Is(err, queue.ErrTooLarge) {
		t.Errorf("4 MiB Admit = %v, want ErrTooLarge", err)
	}
	if _, err := q.Admit(ctx, queue.Job{ID: "long", Key: strings.Repeat("k", 300)}); !errors.Is(err, queue.ErrBadKey) {
		t.Errorf("300-byte key Admit = %v, want ErrBadKey", err)
	}
	d, _ := q.Depths(ctx)
	if len(d) != 0 {
		t.Errorf("after rejected admissions depths = %v, want empty", d)
	}
}

func TestAdmitUnavailable(t *testing.T) {
	ctx := context.Background()
	s := testenv.NATS(t)
	js, _ := jetstream.New(testenv.Connect(t, s))
	q, err := queue.Open(ctx, js, "p", 5, queue.Config{Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.Shutdown()
	for _, op := range []struct {
		name string
		call func() error
	}{
		{"Admit", func() error { _, err := q.Admit(ctx, queue.Job{ID: "x", Key: "k"}); return err }},
		{"Remove", func() error { return q.Remove(ctx, 1) }},
	} {
		start := time.Now()
		if err := op.call(); !errors.Is(err, queue.ErrUnavailable) {
			t.Errorf("%s with JetStream down = %v, want ErrUnavailable", op.name, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s with JetStream down took %v, want it bounded by the timeout", op.name, d)
		}
	}
}

func TestWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q, _ := open(t, 10)
	q.Admit(ctx, queue.Job{ID: "1", Key: "a.b"})
	got := make(chan queue.Notice, 10)
	go q.Watch(ctx, func(n queue.Notice) { got <- n })
	q.Admit(ctx, queue.Job{ID: "2", Key: "c"})
	for i, want := range []string{"a.b", "c"} {
		select {
		case n := <-got:
			if key, _ := n.Key(); key != want || n.Seq != uint64(i+1) {
				t.Errorf("notice %d = %+v, want key %q seq %d", i, n, want, i+1)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no notice %d", i)
		}
	}
}

// A watch reading jobs whole over more large jobs than one pull request
// may carry (each asks for 16 MiB at most) reports them all, in order and
// without waiting for a pull to expire: the server ends a request whose
// next job would not fit, and the watch asks again at once.
func TestWatchReadsPastItsByteBound(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q, _ := openWith(t, "big", 10, queue.Config{})
	const jobs = 40 // 40 MiB: three requests' worth
	for i := range jobs {
		if _, err := q.Admit(ctx, queue.Job{Key: fmt.Sprint("k", i), Payload: make([]byte, queue.DefaultMaxPayload)}); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan queue.Notice, jobs)
	go q.Watch(ctx, func(n queue.Notice) { got <- n })
	deadline := time.After(10 * time.Second) // a pull's expiry is 30 s
	for i := range jobs {
		select {
		case n := <-got:
			m := n.Job()
			if n.Seq != uint64(i+1) || m == nil || len(m.Payload) != queue.DefaultMaxPayload {
				t.Fatalf("notice %d: seq %d, job read whole %v, want seq %d with its %d bytes", i, n.Seq, m != nil, i+1, queue.DefaultMaxPayload)
			}
		case <-deadline:
			t.Fatalf("%d of %d jobs reported in 10 s", i, jobs)
		}
	}
}

// The watch reports each job whole, as Get reads it (so that a drainer
// need not read it again), or with WatchHeadersOnly its sequence only.
func TestWatchReportsJobsWhole(t *testing.T) {
	for _, headersOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("headers only %v", headersOnly), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := testenv.NATS(t)
			js, err := jetstream.New(testenv.Connect(t, s))
			if err != nil {
				t.Fatal(err)
			}
			q, err := queue.Open(ctx, js, "orders", 10, queue.Config{WatchHeadersOnly: headersOnly})
			if err != nil {
				t.Fatal(err)
			}
			jobs := []queue.Job{
				{Key: "plain", Payload: []byte("hello")},
				{Key: "large", Payload: make([]byte, queue.DefaultMaxPayload)}, // read whole within the watch's buffer
				{ID: "j-2", Key: "ünïcode key", Payload: []byte{0, 1, 2}, Header: nats.Header{"Traceparent": {"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}, Attempt: 3},
			}
			for _, j := range jobs {
				if _, err := q.Admit(ctx, j); err != nil {
					t.Fatal(err)
				}
			}
			got := make(chan queue.Notice, 10)
			go q.Watch(ctx, func(n queue.Notice) { got <- n })
			for range jobs {
				var n queue.Notice
				select {
				case n = <-got:
				case <-time.After(5 * time.Second):
					t.Fatal("no notice")
				}
				if headersOnly {
					if m := n.Job(); m != nil {
						t.Errorf("notice of %d: job %+v, want none (headers only)", n.Seq, m)
					}
					continue
				}
				read, err := q.Get(ctx, n.Token, n.Seq)
				if err != nil {
					t.Fatal(err)
				}
				w := n.Job()
				if w == nil || w.Seq != read.Seq || w.Token != read.Token || w.ID != read.ID || w.Key != read.Key ||
					string(w.Payload) != string(read.Payload) || fmt.Sprint(w.Header) != fmt.Sprint(read.Header) ||
					w.Attempt != read.Attempt || !w.EnqueuedAt.Equal(read.EnqueuedAt) || w.Undecodable != read.Undecodable {
					t.Errorf("notice of %d: job %+v, want it as Get reads it: %+v", n.Seq, w, read)
				}
			}
		})
	}
}

func TestOpenKeepsLargerLimitOverLiveJobs(t *testing.T) {
	ctx := context.Background()
	q, js := open(t, 5)
	q.Admit(ctx, queue.Job{ID: "1", Key: "k"})
	q2, err := queue.Open(ctx, js, "orders", 2, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := js.Stream(ctx, q2.Stream())
	if got := s.CachedInfo().Config.MaxMsgsPerSubject; got != 5 {
		t.Errorf("stream limit after lowering over live jobs = %d, want 5 kept", got)
	}
	d, _ := q2.Depths(ctx)
	if d["k"] != 1 {
		t.Errorf("depth after reopen = %d, want 1 (nothing purged)", d["k"])
	}
}

// A message of the queue's stream that Admit cannot have stored reads back
// with Undecodable saying why; what a producer may get wrong without harm
// (the enqueue time, the attempt) does not make it undecodable.
func TestUndecodable(t *testing.T) {
	ctx := context.Background()
	q, js := open(t, 10)
	for _, c := range []struct {
		token, header, value, want string
	}{
		{"~x", "", "", `subject token "~x" is not a key's encoding`},
		{"a+b", "", "", `subject token "a+b" is not a key's encoding`},
		{"k", queue.HeaderJobID, "not an id!", `Shaper-Job-Id header "not an id!" is not a job id`},
		{"k", queue.HeaderKey, "other", `Shaper-Key header "other" is not the key of its subject token "k"`},
		{"k", queue.HeaderKey, "k", ""},
		{"k", queue.HeaderAttempt, "many", ""},
		{"k", queue.HeaderEnqueuedAt, "yesterday", ""},
	} {
		m := &nats.Msg{Subject: q.Subject(c.token), Header: nats.Header{}}
		if c.header != "" {
			m.Header.Set(c.header, c.value)
		}
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := q.Get(ctx, c.token, ack.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(got.Undecodable, c.want) || (c.want == "") != (got.Undecodable == "") ||
			!queue.ValidJobID(got.ID) || got.Attempt != 1 || got.EnqueuedAt.IsZero() {
			t.Errorf("%s with %s %q: undecodable %q, id %q, attempt %d; want %q, a job id, attempt 1",
				c.token, c.header, c.value, got.Undecodable, got.ID, got.Attempt, c.want)
		}
	}
	if _, err := q.Admit(ctx, queue.Job{ID: "a/b", Key: "k"}); !errors.Is(err, queue.ErrBadID) {
		t.Errorf("Admit with id a/b: %v, want ErrBadID", err)
	}
	l := q.Layout()
	if m, err := l.Message(queue.Job{Key: "k", Payload: []byte("x")}); err != nil || m.Header != nil || m.Subject != q.Subject("k") {
		t.Errorf("the message of a plain job: %+v, %v; want no header at all, on the key's subject", m, err)
	}
}

// A watch started on a stream that jobs keep arriving at catches up once
// it has reported the jobs stored when it started, though it may never
// see nothing pending.
func TestWatchCaughtUpUnderSteadyFlow(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q, _ := open(t, 100000)
	for i := range 2000 {
		q.AdmitAsync(queue.Job{ID: fmt.Sprintf("before-%d", i), Key: fmt.Sprintf("k%d", i%50)})
	}
	if _, err := q.Admit(ctx, queue.Job{ID: "last-before", Key: "k0"}); err != nil {
		t.Fatal(err)
	}
	go func() { // a steady flow, never pausing
		for i := 0; ctx.Err() == nil; i++ {
			q.Admit(ctx, queue.Job{ID: fmt.Sprintf("after-%d", i), Key: fmt.Sprintf("k%d", i%50)})
		}
	}()
	go q.Watch(ctx, func(queue.Notice) { time.Sleep(20 * time.Microsecond) }) // a watcher a little slower than the flow
	select {
	case <-q.WatchCaughtUp():
	case <-time.After(30 * time.Second):
		t.Fatal("the watch never said it caught up under a steady flow")
	}
}

// A watch started on a stream whose last jobs were removed (delivered:
// their sequences are behind the stream's last, and no job is left to
// report after the last one it reported) is not stalled: it stays, with
// no restart and no warning, over more than WatchStall.
func TestWatchNotStalledByRemovedJobs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs testenv.Buffer
	q, _ := openWith(t, "orders", 10, queue.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	var seqs []uint64
	for i := range 5 {
		r, err := q.Admit(ctx, queue.Job{ID: fmt.Sprint(i), Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, r.Seq)
	}
	for _, seq := range seqs[2:] {
		if err := q.Remove(ctx, seq); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan queue.Notice, 10)
	go q.Watch(ctx, func(n queue.Notice) { got <- n })
	for range 2 {
		select {
		case <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("the two jobs left were not reported")
		}
	}
	time.Sleep(queue.WatchStall + queue.WatchStall/2)
	if strings.Contains(logs.String(), "restarting the watch") {
		t.Errorf("the watch restarted with nothing left to report:\n%s", logs.String())
	}
}
