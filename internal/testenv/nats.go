// Package testenv starts the real servers the tests talk to: an in-process
// nats-server with JetStream on a random port and a temporary store, and a
// redis-server process on a free port. It never mocks them.
package testenv

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// NATS starts an in-process nats-server with JetStream enabled, listening on
// a random 127.0.0.1 port with its store in a temporary directory. The server
// is shut down when the test ends.
func NATS(t testing.TB) *server.Server {
	t.Helper()
	return NATSAt(t, t.TempDir())
}

// NATSAt is NATS with the store kept in dir, so a test can restart a server
// on the same data.
func NATSAt(t testing.TB, dir string) *server.Server {
	t.Helper()
	return NATSWith(t, func(o *server.Options) { o.StoreDir = dir })
}

// NATSWith is NATS with its options changed by edit (a store limit such as
// JetStreamMaxStore, for a test of a full store without filling a disk).
func NATSWith(t testing.TB, edit func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	}
	edit(opts)
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("testenv: nats-server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("testenv: nats-server not ready after 10s")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// Connect opens a client connection to s, closed when the test ends.
func Connect(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatalf("testenv: connect %s: %v", s.ClientURL(), err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Consume takes every delivery on subject from the NATS server at url, as a
// consumer of confirmed deliveries does (it answers each), until the test
// ends, and returns the count of deliveries taken.
func Consume(t testing.TB, url, subject string) *atomic.Int64 {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatalf("testenv: consume %s: %v", subject, err)
	}
	t.Cleanup(nc.Close)
	var n atomic.Int64
	if _, err := nc.Subscribe(subject, func(m *nats.Msg) {
		n.Add(1)
		if m.Reply != "" {
			m.Respond(nil)
		}
	}); err != nil {
		t.Fatalf("testenv: consume %s: %v", subject, err)
	}
	// Subscribe only queues SUB: make sure the server has it.
	if err := nc.Flush(); err != nil {
		t.Fatalf("testenv: consume %s: %v", subject, err)
	}
	return &n
}
