package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsNode is one nats-server process of a cluster.
type natsNode struct {
	name string // server name, as StreamInfo's Cluster.Leader reports it
	port int    // client port
	p    *proc
}

func (n *natsNode) url() string { return "nats://127.0.0.1:" + strconv.Itoa(n.port) }

// natsCluster is a JetStream cluster of nats-server processes on 127.0.0.1.
type natsCluster struct {
	nodes []*natsNode
}

// startCluster starts an n-node JetStream cluster and waits until it can
// place a stream with n replicas.
func startCluster(t *testing.T, n int) *natsCluster {
	t.Helper()
	ports := freePorts(t, 2*n)
	var routes []string
	for i := range n {
		routes = append(routes, "nats://127.0.0.1:"+strconv.Itoa(ports[n+i]))
	}
	c := &natsCluster{}
	for i := range n {
		node := &natsNode{name: fmt.Sprintf("n%d", i+1), port: ports[i]}
		node.p = startProc(t, "nats-server "+node.name, bins.natsServer,
			"-a", "127.0.0.1", "-p", strconv.Itoa(node.port),
			"-n", node.name,
			"-js", "-sd", t.TempDir(),
			"--cluster_name", "c1",
			"--cluster", routes[i],
			"--routes", strings.Join(routes, ","),
		)
		c.nodes = append(c.nodes, node)
	}
	c.waitJetStream(t, n, 60*time.Second)
	return c
}

// urls returns the client URLs of every node, comma-separated.
func (c *natsCluster) urls() string {
	var us []string
	for _, n := range c.nodes {
		us = append(us, n.url())
	}
	return strings.Join(us, ",")
}

// node returns the node with the given server name, or nil.
func (c *natsCluster) node(name string) *natsNode {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// connect opens a client connection to the cluster, closed when the test ends.
func (c *natsCluster) connect(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(c.urls(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond),
		nats.RetryOnFailedConnect(true), nats.Name("integration admin"))
	if err != nil {
		t.Fatalf("connect %s: %v", c.urls(), err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// waitJetStream waits until the meta group has a leader and a stream with
// replicas replicas can be created, failing the test after d.
func (c *natsCluster) waitJetStream(t *testing.T, replicas int, d time.Duration) {
	t.Helper()
	_, js := c.connect(t)
	deadline := time.Now().Add(d)
	var err error
	for time.Now().Before(deadline) {
		for _, n := range c.nodes {
			if n.p.exited() {
				t.Fatalf("%s exited while the cluster formed: %s", n.p.name, n.p.state())
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = probeStream(ctx, js, replicas)
		cancel()
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("JetStream cluster not ready after %v: %v", d, err)
}

// probeStream creates and deletes a stream with the given replicas.
func probeStream(ctx context.Context, js jetstream.JetStream, replicas int) error {
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("account info: %w", err)
	}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "INTEGRATION_PROBE", Subjects: []string{"integration.probe"}, Replicas: replicas,
	})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("create R%d stream: %w", replicas, err)
	}
	if err := js.DeleteStream(ctx, "INTEGRATION_PROBE"); err != nil {
		return fmt.Errorf("delete probe stream: %w", err)
	}
	return nil
}

// streamLeader returns the server name of stream's leader.
func streamLeader(t *testing.T, js jetstream.JetStream, stream string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info := s.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("stream %s has no leader: %+v", stream, info.Cluster)
	}
	return info.Cluster.Leader
}
