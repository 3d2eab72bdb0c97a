package integration

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSIGHUPReloads edits the policy file of a running shaper and sends it
// SIGHUP, as an operator (or a closing terminal) does: a good file is applied
// without a restart and without losing a queued job; a bad one is refused
// with its line in the log and the running policies kept; the process
// lives through both.
func TestSIGHUPReloads(t *testing.T) {
	needBinaries(t)
	const first = "policies:\n  - name: a\n    outflow: 2/s\n    queue: 100\n"
	cfg := embeddedShaper(t, first)
	sh := startShaper(t, cfg)
	sub := newSubmitter(cfg.httpAddr, 5*time.Second)
	ctx := context.Background()
	var ids []string
	for i := range 5 { // no consumer: they stay queued
		a := sub.submit(ctx, "a", "k", "job "+strconv.Itoa(i))
		if a.code != 202 {
			t.Fatalf("submit = %d %v", a.code, a.err)
		}
		ids = append(ids, a.id)
	}

	write := func(yaml string) {
		if err := os.WriteFile(cfg.policies, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hup := func() {
		if err := syscall.Kill(sh.pid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	write(first + "  - name: b\n    outflow: 7/s\n    queue: 3\n")
	hup()
	waitFor(t, 10*time.Second, "policy b after SIGHUP", func() bool {
		ps, err := policyStates(cfg.httpAddr)
		return err == nil && ps["b"].Queue == 3
	})
	if a := sub.submit(ctx, "b", "k", "x"); a.code != 202 {
		t.Errorf("submit to the policy added by SIGHUP = %d %v, want 202", a.code, a.err)
	}

	write(first + "  - name: b\n    outflow: fast\n    queue: 3\n")
	hup()
	waitFor(t, 10*time.Second, "the refused reload in the log", func() bool {
		return strings.Contains(sh.out.String(), "policies.yaml:6")
	})
	if sh.exited() {
		t.Fatalf("the shaper exited on SIGHUP: %s", sh.state())
	}
	ps, err := policyStates(cfg.httpAddr)
	if err != nil || ps["b"].Outflow.String() != "7/s" || ps["a"].Queued != 5 {
		t.Errorf("after a bad file: b outflow %s, a queued %d (%v); want the running 7/s and all 5 jobs", ps["b"].Outflow, ps["a"].Queued, err)
	}
	for _, id := range ids {
		if j, err := jobState(cfg.httpAddr, id); err != nil || j.Status.String() != "queued" {
			t.Errorf("job %s after two reloads = %+v, %v; want queued", id, j, err)
		}
	}
}

// TestSecondServeOnDataDirectory starts a second shaper on the data
// directory of a running one (other ports): it must exit 1 at once, naming
// the holder, and leave the first one serving.
func TestSecondServeOnDataDirectory(t *testing.T) {
	needBinaries(t)
	cfg := embeddedShaper(t, "policies:\n  - name: a\n    outflow: 2/s\n    queue: 10\n")
	first := startShaper(t, cfg)
	second := cfg
	ports := freePorts(t, 2)
	second.httpAddr = "127.0.0.1:" + strconv.Itoa(ports[0])
	second.natsListen = "127.0.0.1:" + strconv.Itoa(ports[1])
	p := startProc(t, "second shaper", bins.shaper, "serve", "--policies", second.policies, "--http", second.httpAddr,
		"--data", second.data, "--nats-listen", second.natsListen)
	code, ok := p.wait(15 * time.Second)
	if !ok {
		t.Fatal("a second shaper on a used data directory is still running after 15s")
	}
	out := p.out.String()
	if code != 1 || !strings.Contains(out, "pid "+strconv.Itoa(first.pid())) || !strings.Contains(out, cfg.httpAddr) {
		t.Errorf("second shaper exited %d with:\n%s\nwant exit 1 naming pid %d and %s", code, out, first.pid(), cfg.httpAddr)
	}
	if first.exited() {
		t.Fatalf("the first shaper exited: %s", first.state())
	}
	if a := newSubmitter(cfg.httpAddr, 5*time.Second).submit(context.Background(), "a", "k", "x"); a.code != 202 {
		t.Errorf("the first shaper answers %d %v after the second tried, want 202", a.code, a.err)
	}
}
