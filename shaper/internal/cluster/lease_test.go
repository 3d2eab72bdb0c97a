package cluster_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/freeport"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper/internal/cluster"
)

// These tests run HoldLease on a real in-process JetStream. The protocol's
// timing is the lease machine's, tested on a virtual clock
// (leasemachine_test.go, lease_property_test.go); here no test sleeps or
// asserts a timing window: each waits, within a bound, for what must
// happen, and checks the order of events on this process's monotonic
// clock.

// told is one call of held.
type told struct {
	holding bool
	until   time.Time
	at      time.Time
}

// holder is one shaper's side of a lease: every held it was told, with
// when, and its log.
type holder struct {
	t      *testing.T
	name   string
	mu     sync.Mutex
	events []told
	log    syncBuffer
	change chan struct{}
}

func (h *holder) held(holding bool, until time.Time) {
	h.mu.Lock()
	h.events = append(h.events, told{holding, until, time.Now()})
	h.mu.Unlock()
	select {
	case h.change <- struct{}{}:
	default:
	}
}

// all returns what the holder was told so far.
func (h *holder) all() []told {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]told(nil), h.events...)
}

// last returns the last thing it was told, zero if nothing.
func (h *holder) last() told {
	if e := h.all(); len(e) > 0 {
		return e[len(e)-1]
	}
	return told{}
}

// wait waits at most d until cond holds of what the holder was told.
func (h *holder) wait(what string, d time.Duration, cond func([]told) bool) {
	h.t.Helper()
	deadline := time.After(d)
	poll := time.NewTicker(10 * time.Millisecond) // for conditions on the time
	defer poll.Stop()
	for !cond(h.all()) {
		select {
		case <-h.change:
		case <-poll.C:
		case <-deadline:
			h.t.Fatalf("%s: not %s within %v; told %v; log:\n%s", h.name, what, d, h.all(), h.log.String())
		}
	}
}

// holding waits at most d until the holder holds the lease, and returns
// when it was told.
func (h *holder) holding(d time.Duration) told {
	h.t.Helper()
	h.wait("holding", d, func(e []told) bool { return len(e) > 0 && e[len(e)-1].holding })
	return h.last()
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// hold runs HoldLease of policy "p" for a shaper named instance on its own
// connection to url, until the test ends or stop is called.
func hold(t *testing.T, url, instance string, ttl time.Duration) (h *holder, nc *nats.Conn, stop func()) {
	t.Helper()
	js := jetStreamOf(t, url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	nc = js.Conn()
	h = &holder{t: t, name: instance, change: make(chan struct{}, 1)}
	log := slog.New(slog.NewTextHandler(&h.log, nil))
	c, err := cluster.Open(context.Background(), js, cluster.Config{Instance: instance, LeaseTTL: ttl, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.HoldLease(ctx, "p", h.held, nil)
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return h, nc, stop
}

// renewals waits until h has been told n new ends of its holding after
// from, each later than the one before, and returns the last.
func renewals(h *holder, from told, n int, d time.Duration) told {
	h.t.Helper()
	h.wait("renewing", d, func(e []told) bool {
		seen, prev := 0, from.until
		for _, x := range e {
			if x.at.After(from.at) && x.holding && x.until.After(prev) {
				seen, prev = seen+1, x.until
			}
		}
		return seen >= n
	})
	return h.last()
}

// TestHoldLeaseHandOver: a takes the lease and renews it, each renewal
// moving the end of its holding on; b, looking meanwhile, never holds it;
// a's graceful stop tells a it no longer holds before b takes it; another
// shaper's entry replacing b's ends b's holding.
func TestHoldLeaseHandOver(t *testing.T) {
	s := testenv.NATS(t)
	const ttl = 1500 * time.Millisecond
	a, _, stopA := hold(t, s.ClientURL(), "a", ttl)
	took := a.holding(5 * time.Second)
	if left := time.Until(took.until); left <= 0 || left > ttl {
		t.Fatalf("a holds until %v from now, want within the TTL (%v)", left, ttl)
	}
	b, bnc, _ := hold(t, s.ClientURL(), "b", ttl)
	renewals(a, took, 3, 5*ttl)
	if e := b.all(); len(e) > 0 {
		t.Fatalf("b was told %v while a renewed its lease", e)
	}
	stopA()
	released := a.last()
	if released.holding {
		t.Fatalf("a was last told %v after its stop, want not holding", released)
	}
	bTook := b.holding(3 * ttl)
	if bTook.at.Before(released.at) {
		t.Errorf("b took the lease at %v, before a was told it no longer held it (%v)", bTook.at, released.at)
	}
	t.Logf("b took the lease %v after a's graceful stop", bTook.at.Sub(released.at).Round(time.Millisecond))

	js, _ := jetstream.New(bnc)
	kv, err := js.KeyValue(context.Background(), "SHAPER_LEASES")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "p", []byte(`{"instance":"c","run":"x"}`)); err != nil {
		t.Fatal(err)
	}
	b.wait("told it lost the lease to c", 3*ttl, func(e []told) bool { return !e[len(e)-1].holding })
	if !strings.Contains(b.log.String(), "taken over by another shaper") {
		t.Errorf("b's log does not say the lease was taken over:\n%s", b.log.String())
	}
}

// TestHoldLeaseTakenOverWhenHolderDies: a dies without a word (its
// connection closes); b takes the lease over, and not before the end of
// a's last holding.
func TestHoldLeaseTakenOverWhenHolderDies(t *testing.T) {
	s := testenv.NATS(t)
	const ttl = 1500 * time.Millisecond
	a, anc, _ := hold(t, s.ClientURL(), "a", ttl)
	renewals(a, a.holding(5*time.Second), 1, 5*ttl)
	b, _, _ := hold(t, s.ClientURL(), "b", ttl)
	renewals(a, a.last(), 2, 5*ttl) // b looks meanwhile
	anc.Close()
	died := time.Now()
	last := a.last()
	took := b.holding(5 * ttl)
	t.Logf("lease of %v taken over %v after its holder died; a's holding had ended %v before",
		ttl, took.at.Sub(died).Round(time.Millisecond), took.at.Sub(last.until).Round(time.Millisecond))
	if !took.at.After(last.until) {
		t.Errorf("b took the lease at %v, before a's holding ended (%v)", took.at, last.until)
	}
}

// TestHoldLeaseThroughOutage: while JetStream is down a holder is not told
// it lost the lease, even past the end of its holding, through which it
// delivers nothing; it says once that renewals fail, and once JetStream is
// back it holds the lease again, never having been told it lost it (its
// entry expired meanwhile, and nobody else took it).
func TestHoldLeaseThroughOutage(t *testing.T) {
	port, err := freeport.One()
	if err != nil {
		t.Fatal(err)
	}
	opts := &server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	start := func() *server.Server {
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats-server not ready")
		}
		return s
	}
	s := start()
	const ttl = 1500 * time.Millisecond
	a, _, _ := hold(t, s.ClientURL(), "a", ttl)
	before := renewals(a, a.holding(5*time.Second), 1, 5*ttl)
	s.Shutdown()
	s.WaitForShutdown()
	a.wait("past the end of its holding", 5*ttl, func([]told) bool { return time.Now().After(before.until.Add(ttl / 3)) })
	for _, e := range a.all() {
		if !e.holding {
			t.Fatalf("told %v during the outage, want still holding: only the end of its holding bounds it", a.all())
		}
	}
	if n := strings.Count(a.log.String(), "renewal failing"); n != 1 {
		t.Errorf("%d lines saying renewals fail, want 1:\n%s", n, a.log.String())
	}
	// Its end passed: the drain stopped, and the log says so, once.
	const lapsed = "drain lease: not renewed by its end: delivering nothing until a renewal is stored"
	a.wait("saying its holding ended", 5*ttl, func([]told) bool { return strings.Contains(a.log.String(), lapsed) })
	time.Sleep(ttl / 2) // more failed renewals
	if n := strings.Count(a.log.String(), lapsed); n != 1 {
		t.Errorf("%d lines saying the holding ended, want 1:\n%s", n, a.log.String())
	}
	s = start()
	defer s.Shutdown()
	restarted := time.Now()
	a.wait("holding again, until a time to come", 5*ttl, func(e []told) bool {
		l := e[len(e)-1]
		return l.holding && l.at.After(restarted) && l.until.After(time.Now())
	})
	for _, e := range a.all() {
		if !e.holding {
			t.Errorf("told %v, want never told it lost the lease: nobody else wanted it", a.all())
		}
	}
	t.Logf("after an outage longer than the lease: %s", strings.Join(grep(a.log.String(), "drain"), "; "))
}

func grep(s, sub string) []string {
	var out []string
	for l := range strings.Lines(s) {
		if strings.Contains(l, sub) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}
