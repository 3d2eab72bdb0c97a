package integration

import (
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/shaper/client"
	"github.com/shaper-dev/shaper/shaper/replay"
)

// downstream is TestTuneFidelity's consumer: a real NATS subscriber to the
// policy's deliveries that answers every one at once, except during its
// windows of trace time, when it fails every one, and times each job it
// takes from its Shaper-Enqueued-At header.
//
// The shaper's NATS sink (drain.NATSSink) takes any reply as taken unless
// it carries a Status header that is not 2xx; a 503 without a body is NATS's
// own "no responders", which the sink counts as no consumer at all, not as
// a failed attempt. So a failure here is a reply with Status 500 and a body:
// a failed attempt, as a consumer answering with an error makes one.
type downstream struct {
	origin time.Time       // the trace's time 0: when the producer starts it
	down   []replay.Window // of trace time, from origin

	mu        sync.Mutex
	waits     []float64 // ms, of each job taken, once
	taken     map[string]bool
	failed    int // attempts failed on purpose
	redeliver int // deliveries of a job already taken
}

// newDownstream subscribes a downstream to subject on the NATS server at
// url, failing every delivery while the time since origin is in a window
// of down.
func newDownstream(t *testing.T, url, subject string, origin time.Time, down []replay.Window) *downstream {
	t.Helper()
	c := &downstream{origin: origin, down: down, taken: make(map[string]bool)}
	nc, err := nats.Connect(url, nats.Name("tune fidelity consumer"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	fail := &nats.Msg{Header: nats.Header{"Status": []string{"500"}, "Description": []string{"down"}}, Data: []byte("down")}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		at := time.Now()
		if c.isDown(at) {
			_ = m.RespondMsg(fail)
			c.mu.Lock()
			c.failed++
			c.mu.Unlock()
			return
		}
		_ = m.Respond(nil) // taken
		enq, err := time.Parse(time.RFC3339Nano, m.Header.Get(client.HeaderEnqueuedAt))
		if err != nil {
			t.Errorf("a delivery without %s: %v", client.HeaderEnqueuedAt, err)
			return
		}
		id := m.Header.Get(client.HeaderJobID)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.taken[id] {
			c.redeliver++
			return
		}
		c.taken[id] = true
		c.waits = append(c.waits, float64(at.Sub(enq))/float64(time.Millisecond))
	})
	if err != nil {
		t.Fatal(err)
	}
	sub.SetPendingLimits(-1, -1)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// isDown reports whether the downstream fails a delivery received at at.
func (c *downstream) isDown(at time.Time) bool {
	since := at.Sub(c.origin)
	for _, w := range c.down {
		if since >= w.From && since < w.To {
			return true
		}
	}
	return false
}

// downstreamFigures is what a downstream measured.
type downstreamFigures struct {
	taken, failed, redelivered int
	waits                      []float64 // ms
}

// figures returns what c measured so far.
func (c *downstream) figures() downstreamFigures {
	c.mu.Lock()
	defer c.mu.Unlock()
	return downstreamFigures{taken: len(c.waits), failed: c.failed, redelivered: c.redeliver, waits: slices.Clone(c.waits)}
}

// percentileMs returns the nearest-rank p-quantile of ms.
func percentileMs(ms []float64, p float64) float64 {
	if len(ms) == 0 {
		return 0
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	return s[max(int(math.Ceil(p*float64(len(s))))-1, 0)]
}
