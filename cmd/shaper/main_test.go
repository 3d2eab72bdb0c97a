package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/shaper-dev/shaper/internal/cmdline"
	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := runWith(context.Background(), &out, &errOut, append([]string{"shaper"}, args...))
	return out.String(), errOut.String(), err
}

// newAPI is a client of the shaper whose HTTP API listens on addr.
func newAPI(t *testing.T, addr string) *client.Client {
	t.Helper()
	api, err := client.New("http://"+addr, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return api
}

// exitCode is the exit code main gives err.
func exitCode(err error) int { return cmdline.ExitCode(err) }

func TestPoliciesCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("policies:\n  - name: a\n    outflow: 5/s\n    queue: 10\n  - {name: b, outflow: 5/s, queue: 10, concurrency: {key: 2, total: 6}}\n"), 0o644)
	one := filepath.Join(dir, "one.yaml")
	os.WriteFile(one, []byte("policies:\n  - name: a\n    outflow: 5/s\n    queue: 10\n"), 0o644)
	if out, _, err := runCLI(t, "policies", "check", one); err != nil || !strings.Contains(out, "one.yaml: 1 policy OK") {
		t.Errorf("policies check of one policy = %v\n%s", err, out)
	}
	out, _, err := runCLI(t, "policies", "check", good)
	if err != nil || !strings.Contains(out, "2 policies OK") || !strings.Contains(out, "b: outflow 5/s per key, queue 10, overflow reject, 2 awaiting receipt per key (6 in all), deliver") ||
		strings.Contains(out, "a: outflow 5/s per key, queue 10, overflow reject, 1 awaiting") {
		t.Errorf("check good file = %q, %v; want b's concurrency shown, a's default left out", out, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("policies:\n  - name: a\n    outflow: fast\n    queue: 10\n"), 0o644)
	_, _, err = runCLI(t, "policies", "check", bad)
	if exitCode(err) != exitBadPolicies || !strings.Contains(err.Error(), "bad.yaml:3:") || !strings.Contains(err.Error(), "outflow") {
		t.Errorf("check bad file = %v (exit %d), want exit %d naming line 3 and outflow", err, exitCode(err), exitBadPolicies)
	}
	_, _, err = runCLI(t, "policies", "check", filepath.Join(dir, "missing.yaml"))
	if exitCode(err) != exitBadPolicies {
		t.Errorf("check missing file: exit %d, want %d", exitCode(err), exitBadPolicies)
	}
}

func TestServeRefusesBadPolicyFile(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("policies:\n  - name: a\n    outflow: 5/s\n    queue: -1\n"), 0o644)
	_, _, err := runCLI(t, "serve", "--policies", bad, "--http", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1", "--data", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:4:") {
		t.Errorf("serve with a bad file = %v, want the error naming line 4", err)
	}
	// serve and policies check exit alike for a bad file.
	_, _, checkErr := runCLI(t, "policies", "check", bad)
	if exitCode(err) != exitBadPolicies || exitCode(checkErr) != exitBadPolicies {
		t.Errorf("bad file: serve exits %d, policies check %d, want both %d", exitCode(err), exitCode(checkErr), exitBadPolicies)
	}
}

func TestDeadCommands(t *testing.T) {
	var up atomic.Bool
	got := make(chan string, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		got <- r.Header.Get("Shaper-Key")
	}))
	defer hook.Close()
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, fmt.Sprintf(`
policies:
  - name: hooks
    outflow: 20/s
    queue: 10
    retry: {attempts: 2, backoff: 50ms, max_backoff: 100ms}
    deliver: {webhook: %q}
`, hook.URL))})
	addr := s.HTTPAddr()
	api := newAPI(t, addr)
	if res, err := api.Submit(t.Context(), "hooks", "a.b", []byte("payload")); err != nil || res.Outcome != client.OutcomeAccepted {
		t.Fatalf("submit = %+v, %v", res, err)
	}
	var out string
	var err error
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out, "delivery"); {
		if time.Now().After(deadline) {
			t.Fatalf("dead list never showed the job: %q", out)
		}
		time.Sleep(50 * time.Millisecond)
		out, _, err = runCLI(t, "dead", "list", "--http", addr, "--policy", "hooks")
		if err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(out, "a.b") || !strings.Contains(out, "attempt 2: delivery failed") {
		t.Errorf("dead list = %q, want the key and the last error", out)
	}
	out, _, err = runCLI(t, "dead", "show", "hooks", "1", "--http", addr)
	if err != nil || !strings.Contains(out, `"payload": "payload"`) || !strings.Contains(out, `"reason": "delivery"`) {
		t.Errorf("dead show = %q, %v", out, err)
	}
	if _, _, err := runCLI(t, "dead", "purge", "--http", addr); exitCode(err) != 2 {
		t.Errorf("purge without --policy: exit %d, want 2", exitCode(err))
	}
	if _, _, err := runCLI(t, "dead", "list", "--http", addr, "--reason", "bogus"); exitCode(err) != 2 || !strings.Contains(err.Error(), `reason "bogus"`) {
		t.Errorf("list --reason bogus = %v (exit %d), want the shaper's refusal, exit 2", err, exitCode(err))
	}
	up.Store(true)
	out, _, err = runCLI(t, "dead", "replay", "--http", addr, "--policy", "hooks")
	if err != nil || !strings.Contains(out, "1 matched, 1 replayed") {
		t.Errorf("dead replay = %q, %v", out, err)
	}
	select {
	case k := <-got:
		if k != "a.b" {
			t.Errorf("replayed delivery key %q, want a.b", k)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("replayed job never delivered")
	}
	out, _, _ = runCLI(t, "status", "--http", addr)
	if !strings.Contains(out, "hooks") || !strings.Contains(out, "DEAD") || !strings.Contains(out, "DEFERRED") || !strings.Contains(out, "LIMITED") {
		t.Errorf("status = %q, want the deferred, limited and dead columns", out)
	}
}

func TestPoliciesSet(t *testing.T) {
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, "policies:\n  - name: p\n    outflow: 5/s\n    queue: 3\n")})
	addr := s.HTTPAddr()
	// As docs/cli.md writes it: flags after the policy's name.
	out, _, err := runCLI(t, "policies", "set", "p", "--outflow", "9/s", "--queue", "7", "--http", addr)
	if err != nil || !strings.Contains(out, "outflow 9/s per key, queue 7") || !strings.Contains(out, "live override") {
		t.Errorf("policies set = %q, %v", out, err)
	}
	out, _, err = runCLI(t, "status", "--http", addr)
	if err != nil || !strings.Contains(out, "  p*      9/s") || !strings.Contains(out, "* tuned live, until reset (shaper policies reset NAME): p outflow, queue\n") {
		t.Errorf("status after a live change = %q, %v, want the override marked", out, err)
	}
	if _, _, err := runCLI(t, "policies", "set", "--http", addr, "--outflow", "fast", "p"); err == nil || !strings.Contains(err.Error(), "fast") {
		t.Errorf("policies set --outflow fast = %v, want an error naming it", err)
	}
	out, _, err = runCLI(t, "policies", "reset", "p", "--http", addr)
	if err != nil || !strings.Contains(out, "p: back to the policy file") || !strings.Contains(out, "outflow 5/s per key, queue 3") || strings.Contains(out, "override") {
		t.Errorf("policies reset = %q, %v", out, err)
	}
}

func TestServeStartErrorsAreClear(t *testing.T) {
	good := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(good, []byte("policies:\n  - name: a\n    outflow: 5/s\n    queue: 10\n"), 0o644)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	start := time.Now()
	_, _, err = runCLI(t, "serve", "--policies", good, "--http", taken.Addr().String(), "--nats-listen", "127.0.0.1:-1", "--data", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), "--http") {
		t.Errorf("serve on a taken HTTP port = %v, want an error naming the address and --http", err)
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	_, _, err = runCLI(t, "serve", "--policies", good, "--http", "127.0.0.1:0", "--nats-listen", "127.0.0.1:-1", "--data", file)
	if err == nil || !strings.Contains(err.Error(), "data directory") {
		t.Errorf("serve with a file as --data = %v, want an error about the data directory", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the two refused starts took %v, want them prompt", d)
	}
}

// A setting serve refuses before it starts is a bad command line: exit 2,
// naming the flag. The HTTP API beyond loopback without an admin token is
// one.
func TestServeRefusesBadSettings(t *testing.T) {
	good := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(good, []byte("policies:\n  - name: a\n    outflow: 5/s\n    queue: 10\n"), 0o644)
	serve := []string{"serve", "--policies", good, "--nats-listen", "127.0.0.1:-1", "--data", t.TempDir()}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--http", "0.0.0.0:0"}, []string{"shaper: admin token: the HTTP API listens beyond loopback (0.0.0.0:0) and no admin token is set", "(see --admin-token, or --admin-loopback-only)"}},
		{[]string{"--http", "127.0.0.1:0", "--sync", "often"}, []string{`shaper serve: --sync "often": want always or a positive duration`}},
		{[]string{"--http", "127.0.0.1:0", "--log-level", "loud"}, []string{`shaper serve: --log-level "loud": want debug, info, warn or error`}},
		{[]string{"--http", "127.0.0.1:0", "--nats-listen", "0.0.0.0:0"}, []string{"shaper: NATS token: the embedded NATS server would listen beyond loopback (0.0.0.0:0) without credentials", "(see --nats-token)"}},
		{[]string{"--http", "127.0.0.1:0", "--lease-ttl", "100ms"}, []string{"shaper: lease TTL: 100ms: want at least 1s", "(see --lease-ttl)"}},
		{[]string{"--http", "127.0.0.1:0", "--max-store", "4pages"}, []string{`shaper serve: --max-store "4pages": unknown unit "pages"`}},
		{[]string{"--http", "127.0.0.1:0", "--max-store", "0"}, []string{`shaper serve: --max-store "0": want a positive size (leave --max-store out`}},
		{[]string{"--http", "127.0.0.1:0", "--max-store", "100k"}, []string{"shaper: max store: 100.0 KiB: want at least 1 MiB", "(see --max-store)"}},
		{[]string{"--http", "127.0.0.1:0", "--max-store", "4GiB", "--nats-url", "nats://127.0.0.1:1"}, []string{"shaper: max store: applies to the embedded JetStream only", "(see --max-store)"}},
	} {
		_, _, err := runCLI(t, append(serve, c.args...)...)
		for _, want := range c.want {
			if exitCode(err) != 2 || err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("serve %s = %v (exit %d), want exit 2 saying %q", strings.Join(c.args, " "), err, exitCode(err), want)
			}
		}
	}
}

func TestOperatorCommandsSendTheAdminToken(t *testing.T) {
	s := testenv.Shaper(t, shaper.Config{
		AdminToken: "s3cret",
		Policies:   testenv.Policies(t, "policies:\n  - name: p\n    outflow: 5/s\n    queue: 3\n"),
	})
	addr := s.HTTPAddr()
	_, _, err := runCLI(t, "policies", "set", "--http", addr, "--outflow", "9/s", "p")
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "--admin-token") {
		t.Errorf("policies set without the token = %v, want 401 and a hint at --admin-token", err)
	}
	if _, _, err := runCLI(t, "dead", "list", "--http", addr, "--admin-token", "wrong"); err == nil {
		t.Error("dead list with a wrong token succeeded")
	}
	t.Setenv("SHAPER_ADMIN_TOKEN", "s3cret")
	out, _, err := runCLI(t, "policies", "set", "--http", addr, "--outflow", "9/s", "p")
	if err != nil || !strings.Contains(out, "outflow 9/s per key") {
		t.Errorf("policies set with SHAPER_ADMIN_TOKEN = %q, %v", out, err)
	}
	if _, _, err := runCLI(t, "dead", "list", "--http", addr); err != nil {
		t.Errorf("dead list with SHAPER_ADMIN_TOKEN = %v", err)
	}
}

// status shows the figures that are the point of the tool (limited,
// deferred, waiting, dead) and, with --watch, prints them again until
// interrupted: time-stamped blocks when not on a terminal.
func TestStatus(t *testing.T) {
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, `
policies:
  - name: later
    outflow: 1/h
    queue: 1
    overflow: defer
  - name: capped
    outflow: 100/s
    queue: 10
    admit: {algorithm: fixed_window, limit: 1/h}
`)})
	api := newAPI(t, s.HTTPAddr())
	for range 3 {
		api.Submit(t.Context(), "later", "k", []byte("x"))
		api.Submit(t.Context(), "capped", "k", []byte("x"))
	}
	rows := map[string][]string{}
	var header []string
	col := func(policy, name string) string {
		for i, h := range header {
			if h == name && i < len(rows[policy]) {
				return rows[policy][i]
			}
		}
		return "?"
	}
	// The deferred drainer learns of the deferred jobs from its watch.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, _, err := runCLI(t, "status", "--http", s.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); f[0] == "POLICY" {
				header = f
			} else {
				rows[f[0]] = f
			}
		}
		if col("later", "DEF-QUEUED") == "2" && strings.Contains(out, "waiting for a consumer: later since ") {
			break
		}
		if time.Now().After(deadline) {
			t.Logf("status:\n%s", out)
			break
		}
	}
	if col("later", "DEFERRED") != "2" || col("later", "DEF-QUEUED") != "2" || col("capped", "LIMITED") != "2" || col("later", "DEAD") != "0" {
		t.Errorf("status = later deferred %s waiting %s dead %s, capped limited %s; want 2, 2, 0, 2",
			col("later", "DEFERRED"), col("later", "DEF-QUEUED"), col("later", "DEAD"), col("capped", "LIMITED"))
	}
	// Nobody subscribes to shaper.out.later: its delivery found no
	// consumer, and status says so, with what to do.
	out, _, err := runCLI(t, "status", "--http", s.HTTPAddr())
	if want := "(nobody answers its deliveries on shaper.out.later.>; its jobs stay queued until one subscribes, e.g. producer sink --subject 'shaper.out.later.>', with --nats-url set to the shaper's NATS server (its \"shaper serving\" log line names it) unless that is nats://127.0.0.1:4222)"; err != nil || !strings.Contains(out, "waiting for a consumer: later since ") || !strings.Contains(out, want) {
		t.Errorf("status = %v\n%s\nwant a line saying later waits for a consumer, ending %q", err, out, want)
	}
	// Once one subscribes, the drain's next probe delivers, and the line goes.
	nc, err := nats.Connect(s.NATSURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Subscribe("shaper.out.later.>", func(m *nats.Msg) { m.Respond(nil) }); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); strings.Contains(out, "waiting for a consumer: later"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("status 10 s after a consumer subscribed:\n%s\nwant no line saying later waits for one", out)
			break
		}
		out, _, _ = runCLI(t, "status", "--http", s.HTTPAddr())
	}

	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	var watched bytes.Buffer
	if err := runWith(ctx, &watched, io.Discard, []string{"shaper", "status", "--watch", "--interval", "200ms", "--http", s.HTTPAddr()}); err != nil {
		t.Fatalf("status --watch = %v", err)
	}
	if n := strings.Count(watched.String(), "--- "); n < 3 || strings.Count(watched.String(), "POLICY") != n {
		t.Errorf("status --watch for 1.2 s every 200ms printed %d blocks, want several time-stamped tables:\n%s", n, watched.String())
	}
}

// Help texts do not say a default twice: urfave/cli prints "(default: x)".
func TestHelpSaysDefaultsOnce(t *testing.T) {
	for _, cmd := range [][]string{{"serve"}, {"status"}, {"policies", "set"}, {"policies", "check"}, {"dead", "list"}, {"dead", "replay"}} {
		out, _, err := runCLI(t, append(cmd, "--help")...)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Count(strings.ToLower(line), "default") > 1 {
				t.Errorf("shaper %s --help: %q says its default twice", strings.Join(cmd, " "), line)
			}
		}
	}
}

// --replicas 3 against a NATS server that is not clustered is said at
// once, naming the flag: the server refuses it for good (it answers 500,
// which start-up took for a passing failure and retried for 2 minutes).
func TestServeReplicasOnASingleServer(t *testing.T) {
	ns := testenv.NATS(t)
	good := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(good, []byte("policies:\n  - name: a\n    outflow: 5/s\n    queue: 10\n"), 0o644)
	start := time.Now()
	_, _, err := runCLI(t, "serve", "--policies", good, "--http", "127.0.0.1:0", "--nats-url", ns.ClientURL(), "--replicas", "3")
	want := "shaper: replicas: 3: the NATS server is not clustered"
	if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.HasSuffix(err.Error(), "(see --replicas)") || time.Since(start) > 10*time.Second {
		t.Errorf("serve --replicas 3 on one server = %v after %v, want at once %q … (see --replicas)", err, time.Since(start), want)
	}
}
