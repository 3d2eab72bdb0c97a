package cluster_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper/internal/cluster"
)

// holder is one shaper's side of a lease: every held(on) it was told, with
// when.
type holder struct {
	mu     sync.Mutex
	events []bool
	at     []time.Time
	change chan struct{}
}

func newHolder() *holder { return &holder{change: make(chan struct{}, 16)} }

func (h *holder) held(on bool) {
	h.mu.Lock()
	h.events, h.at = append(h.events, on), append(h.at, time.Now())
	h.mu.Unlock()
	h.change <- struct{}{}
}

// state returns whether the holder drains now, and how often it was told so.
func (h *holder) state() (on bool, changes int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.events); n > 0 {
		return h.events[n-1], n
	}
	return false, 0
}

// waitFor waits at most d until the holder drains (on) or not, and returns
// when it changed to that.
func (h *holder) waitFor(t *testing.T, on bool, d time.Duration) time.Time {
	t.Helper()
	deadline := time.After(d)
	for {
		h.mu.Lock()
		if n := len(h.events); n > 0 && h.events[n-1] == on {
			at := h.at[n-1]
			h.mu.Unlock()
			return at
		}
		h.mu.Unlock()
		select {
		case <-h.change:
		case <-deadline:
			t.Fatalf("not told held(%v) within %v", on, d)
		}
	}
}

// hold runs HoldLease of policy "p" for a shaper named instance on its own
// connection to url, until the test ends or stop is called.
func hold(t *testing.T, url, instance string, ttl time.Duration) (h *holder, nc *nats.Conn, stop func()) {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Open(context.Background(), js, cluster.Config{Instance: instance, LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	h = newHolder()
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

// A holder keeps its lease, and keeps draining, through a JetStream outage
// shorter than the lease's lifetime: the server restarts, the renewals fail
// meanwhile, and it is still the holder since nobody else took it.
func TestLeaseKeptThroughOutage(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	start := func() *server.Server {
		s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
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
	const ttl = 3 * time.Second
	h, _, _ := hold(t, s.ClientURL(), "a", ttl)
	h.waitFor(t, true, 5*time.Second)
	time.Sleep(ttl / 3) // a renewal in between
	s.Shutdown()
	s.WaitForShutdown()
	time.Sleep(2 * ttl / 3) // longer than a request's bound
	s = start()
	defer s.Shutdown()
	time.Sleep(ttl) // renewals go on after the outage, past the old entry's lifetime
	if on, changes := h.state(); !on || changes != 1 {
		t.Errorf("after an outage of %v with a lease of %v: draining %v after %d changes, want still draining, never stopped", 2*ttl/3, ttl, on, changes)
	}
}

// After its holder dies (no renewal, no hand-over), another shaper takes
// the lease over as soon as it expires: between LeaseTTL−LeaseTTL/3 and
// LeaseTTL after the death, plus one look.
func TestLeaseTakenOverWhenHolderDies(t *testing.T) {
	s := testenv.NATS(t)
	const ttl = 1500 * time.Millisecond
	a, anc, _ := hold(t, s.ClientURL(), "a", ttl)
	a.waitFor(t, true, 5*time.Second)
	b, _, _ := hold(t, s.ClientURL(), "b", ttl)
	time.Sleep(ttl) // b sees a renew
	if on, _ := b.state(); on {
		t.Fatal("b drains while a holds the lease")
	}
	anc.Close() // a is gone without a word
	died := time.Now()
	took := b.waitFor(t, true, 3*ttl).Sub(died)
	t.Logf("lease of %v taken over %v after its holder died", ttl, took.Round(time.Millisecond))
	if lo, hi := ttl-ttl/3-100*time.Millisecond, ttl+ttl/3; took < lo || took > hi {
		t.Errorf("take-over %v after the holder died, want between %v and %v", took, lo, hi)
	}
}

// A graceful stop hands the lease over at once; an entry of another shaper
// found at a renewal ends a holding at the next renewal.
func TestLeaseHandOver(t *testing.T) {
	s := testenv.NATS(t)
	const ttl = 3 * time.Second
	a, _, stopA := hold(t, s.ClientURL(), "a", ttl)
	a.waitFor(t, true, 5*time.Second)
	b, bnc, _ := hold(t, s.ClientURL(), "b", ttl)
	time.Sleep(ttl / 2)
	stopA()
	stopped := time.Now()
	if took := b.waitFor(t, true, ttl).Sub(stopped); took > ttl/3+200*time.Millisecond {
		t.Errorf("b took the lease %v after a stopped gracefully, want within one look (%v)", took, ttl/3)
	}
	// Someone else's entry replaces b's: b stops at its next renewal.
	js, _ := jetstream.New(bnc)
	kv, err := js.KeyValue(context.Background(), "SHAPER_LEASES")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "p", []byte("c")); err != nil {
		t.Fatal(err)
	}
	put := time.Now()
	if took := b.waitFor(t, false, ttl).Sub(put); took > ttl/3+200*time.Millisecond {
		t.Errorf("b stopped %v after another shaper's entry replaced its own, want within one renewal (%v)", took, ttl/3)
	}
}
