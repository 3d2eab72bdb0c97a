package shaper

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startEmbedded runs an in-process nats-server with JetStream storing in
// dir, listening for outside clients on listen ("host:port", port -1 for any).
func startEmbedded(listen, dir string, maxPayload int) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("shaper: --nats-listen %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("shaper: --nats-listen %q: bad port", listen)
	}
	store := filepath.Join(dir, "jetstream")
	if err := os.MkdirAll(store, 0o755); err != nil {
		return nil, fmt.Errorf("shaper: data directory: %w (see --data)", err)
	}
	if f, err := os.CreateTemp(store, ".write-check-*"); err != nil {
		return nil, fmt.Errorf("shaper: data directory %s is not writable: %w (see --data)", dir, err)
	} else {
		f.Close()
		os.Remove(f.Name())
	}
	if port > 0 {
		// The server reports a listen failure only through its log: try first.
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return nil, fmt.Errorf("shaper: embedded nats cannot listen on %s: %w (choose another --nats-listen)", listen, err)
		}
		ln.Close()
	}
	opts := &server.Options{
		ServerName: "shaper",
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   store,
		NoSigs:     true,
		NoLog:      true,
		// Room for the largest job plus its headers (the default is 1 MB).
		MaxPayload: int32(max(maxPayload, 1<<20) + 64<<10),
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("shaper: embedded nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(15 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("shaper: embedded nats did not start on %s with its store in %s", listen, store)
	}
	return s, nil
}
