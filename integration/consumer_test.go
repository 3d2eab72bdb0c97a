package integration

import (
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/client"
)

// consumer subscribes to the deliveries like a real downstream, replies to
// each, and marks the sequence of each job it receives. Safe for
// concurrent use.
type consumer struct {
	mu    sync.Mutex
	seen  []uint64 // bitset of job sequences received
	n     int      // distinct jobs received
	dups  int
	alien int    // ids not named after their place
	err   string // the first asynchronous error
}

func consume(t *testing.T, url, subject string) *consumer {
	t.Helper()
	c := &consumer{}
	nc, err := nats.Connect(url, nats.Name("soak consumer"), nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.mu.Lock()
			if c.err == "" {
				c.err = err.Error()
			}
			c.mu.Unlock()
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	s, err := nc.Subscribe(subject, func(m *nats.Msg) {
		_, seq, ok := queue.ParseJobID(m.Header.Get(client.HeaderJobID))
		c.mu.Lock()
		switch {
		case !ok:
			c.alien++
		case c.mark(seq):
			c.dups++
		default:
			c.n++
		}
		c.mu.Unlock()
		_ = m.Respond(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetPendingLimits(-1, -1); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// mark records seq and says whether it was seen before. c.mu is held.
func (c *consumer) mark(seq uint64) (seen bool) {
	w, bit := seq/64, uint64(1)<<(seq%64)
	for uint64(len(c.seen)) <= w {
		c.seen = append(c.seen, 0)
	}
	seen = c.seen[w]&bit != 0
	c.seen[w] |= bit
	return seen
}

func (c *consumer) received() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func (c *consumer) duplicates() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dups
}

// missing returns how many of seqs were not received.
func (c *consumer) missing(seqs []uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, seq := range seqs {
		if w := seq / 64; w >= uint64(len(c.seen)) || c.seen[w]&(1<<(seq%64)) == 0 {
			n++
		}
	}
	return n
}

// failure says what went wrong on the consumer's side, if anything.
func (c *consumer) failure() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.err != "":
		return c.err
	case c.alien > 0:
		return fmt.Sprintf("%d deliveries with an id not named after its place", c.alien)
	}
	return ""
}
