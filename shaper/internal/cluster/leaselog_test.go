package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLeaseLogNamesThePartition: a partition's lease is logged with its
// policy and partition apart, as the drain's own lines name them, not as
// the lease's name (policy=orders.p1); a whole policy's lease names the
// policy alone.
func TestLeaseLogNamesThePartition(t *testing.T) {
	var buf bytes.Buffer
	c := &Cluster{cfg: Config{Instance: "a"}, log: slog.New(slog.NewTextHandler(&buf, nil))}
	m := newLeaseMachine(time.Second, "a", "run")
	c.logLease(leaseLog("orders", 1, 8), leaseAction{event: evTaken}, m)
	c.logLease(leaseLog("orders", 0, 1), leaseAction{event: evLost, why: "released"}, m)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("logged %d lines, want 2:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], `msg="draining policy" policy=orders partition=1 instance=a`) {
		t.Errorf("a partition's lease was logged as %q, want policy=orders partition=1", lines[0])
	}
	if !strings.Contains(lines[1], `msg="drain lease released" policy=orders instance=a`) {
		t.Errorf("a policy's lease was logged as %q, want policy=orders alone", lines[1])
	}
}
