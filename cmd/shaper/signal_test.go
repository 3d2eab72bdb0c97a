package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
)

// The test binary is also the shaper command, for the tests of what only
// a process shows: signals, exit status, what it prints where.
func TestMain(m *testing.M) { testenv.RunMain(m, "shaper", main) }

// waitOutput waits until out holds want, failing t after d.
func waitOutput(t *testing.T, out *testenv.Buffer, want string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); !strings.Contains(out.String(), want); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q after %v in:\n%s", want, d, out.String())
		}
	}
}

// Ctrl-C is how status --watch stops: it ends quietly with exit status 0,
// without the graceful stop serve announces.
func TestStatusWatchInterrupted(t *testing.T) {
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, "policies:\n  - name: p\n    outflow: 5/s\n    queue: 3\n")})
	cmd, stdout, stderr := testenv.Command(t, "status", "--watch", "--interval", "100ms", "--http", s.HTTPAddr())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, stdout, "POLICY", 10*time.Second)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := testenv.ExitCode(t, cmd, 10*time.Second); code != 0 || stderr.String() != "" {
		t.Errorf("status --watch interrupted: exit %d, stderr %q; want exit 0 and nothing on stderr", code, stderr.String())
	}
}

// serve, interrupted, says that it stops gracefully, and how to force it.
func TestServeInterrupted(t *testing.T) {
	dir := t.TempDir()
	pf := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pf, []byte("policies:\n  - name: p\n    outflow: 5/s\n    queue: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, _, stderr := testenv.Command(t, "serve", "--policies", pf, "--http", "127.0.0.1:0",
		"--nats-listen", "127.0.0.1:-1", "--data", filepath.Join(dir, "data"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, stderr, "shaper: serving 1 policy", 30*time.Second)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code := testenv.ExitCode(t, cmd, 30*time.Second)
	if code != 0 || !strings.Contains(stderr.String(), "shaper: interrupt: stopping gracefully (again to force)") {
		t.Errorf("serve interrupted: exit %d, stderr:\n%s\nwant exit 0 and the graceful stop announced", code, stderr.String())
	}
}

// A second signal exits at once (130); only serve says why.
func TestSecondSignal(t *testing.T) {
	for _, serving := range []bool{false, true} {
		sig := make(chan os.Signal, 2)
		var out strings.Builder
		cancelled, exited := false, -1
		sig <- syscall.SIGINT
		sig <- syscall.SIGTERM
		stopOnSignal(sig, func() { cancelled = true }, &out, serving, func(code int) { exited = code })
		said := strings.Contains(out.String(), "stopping gracefully") && strings.Contains(out.String(), "terminated again: exiting at once")
		if !cancelled || exited != 130 || said != serving || (!serving && out.Len() > 0) {
			t.Errorf("serving %v: cancelled %v, exit %d, said %q", serving, cancelled, exited, out.String())
		}
	}
	for args, want := range map[string]string{"shaper serve --http x": "serve", "shaper --help": "", "shaper status --watch": "status", "shaper": ""} {
		if got := commandOf(strings.Fields(args)); got != want {
			t.Errorf("commandOf(%q) = %q, want %q", args, got, want)
		}
	}
}

// A required flag left out is said first and alone, in one line on
// stderr, with exit status 2: not after the command's whole help.
func TestRequiredFlagSaidFirst(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tune", "--policy", "p"}, "shaper tune: --trace is required (see shaper tune --help)\n"},
		{[]string{"record", "--duration", "1s"}, "shaper record: --policy is required (see shaper record --help)\n"},
	} {
		cmd, stdout, stderr := testenv.Command(t, c.args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if code := testenv.ExitCode(t, cmd, 10*time.Second); code != 2 || stderr.String() != c.want || stdout.String() != "" {
			t.Errorf("shaper %s: exit %d, stderr %q, stdout %q; want exit 2, stderr %q and nothing else",
				strings.Join(c.args, " "), code, stderr.String(), stdout.String(), c.want)
		}
	}
}

// A start-up that keeps retrying (here: a NATS server without JetStream)
// is stopped by a signal at once, not at --start-timeout, and says where
// it was and what the last try answered.
func TestServeInterruptedWhileStarting(t *testing.T) {
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	defer ns.Shutdown()
	dir := t.TempDir()
	pf := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pf, []byte("policies:\n  - name: p\n    outflow: 5/s\n    queue: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, _, stderr := testenv.Command(t, "serve", "--policies", pf, "--http", "127.0.0.1:0", "--nats-url", ns.ClientURL())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, stderr, "start-up: failed, retrying", 30*time.Second)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// --start-timeout is 2 minutes: ten seconds is a stop, not a give-up.
	code := testenv.ExitCode(t, cmd, 10*time.Second)
	out := stderr.String()
	if code != 1 || !strings.Contains(out, "shaper: stopped before serving, while opening the job records") ||
		!strings.Contains(out, "nats-server -js") || strings.Contains(out, "gave up") {
		t.Errorf("serve stopped while starting: exit %d, stderr:\n%s\nwant exit 1, where it stopped, and the JetStream hint", code, out)
	}
}
