package shaper_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

func TestReloadPolicyFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policies.yaml")
	write := func(yaml string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(`
policies:
  - name: slow
    outflow: 1/h
    queue: 10
  - name: gone
    outflow: 1/h
    queue: 3
`)
	set, err := policies.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	r := wrap(t, testenv.Shaper(t, shaper.Config{Policies: set, PolicyFile: file}))
	testenv.Consume(t, r.NATSURL(), "shaper.out.>")
	for range 4 {
		if a := r.post(t, "slow", "k", []byte("x")); a.code != http.StatusAccepted {
			t.Fatalf("POST slow = %d %v", a.code, a.body)
		}
	}
	for range 3 { // one delivered, two left for an hour
		if a := r.post(t, "gone", "k", []byte("x")); a.code != http.StatusAccepted {
			t.Fatalf("POST gone = %d %v", a.code, a.body)
		}
	}
	ctx := context.Background()

	// A broken file changes nothing, and says where it is broken.
	write("policies:\n  - name: slow\n    outflow: 1/h\n    queue: 10\n  - name: new\n    outflow: fast\n    queue: 3\n")
	if _, err := r.Reload(ctx); err == nil || !strings.Contains(err.Error(), ":6:") || !strings.Contains(err.Error(), "fast") {
		t.Fatalf("Reload of a broken file = %v, want an error naming line 6 and the bad rate", err)
	}
	if code, body := r.do(t, "POST", "/v1/reload", ""); code != http.StatusBadRequest || !strings.Contains(body["detail"].(string), "fast") {
		t.Errorf("POST /v1/reload of a broken file = %d %v, want 400 naming the error", code, body)
	}
	// Its problems come in the file's order: line 3 before line 12.
	write("policies:\n  - name: slow\n    outflow: bad\n    queue: 10\n  - name: a\n    outflow: 1/s\n    queue: 1\n" +
		"  - name: b\n    outflow: 1/s\n    queue: 1\n  - name: c\n    outflow: worse\n    queue: 1\n")
	if code, body := r.do(t, "POST", "/v1/reload", ""); code != http.StatusBadRequest {
		t.Errorf("POST /v1/reload of a file broken twice = %d %v, want 400", code, body)
	} else if detail := body["detail"].(string); !(strings.Contains(detail, "bad") && strings.Index(detail, "bad") < strings.Index(detail, "worse")) {
		t.Errorf("POST /v1/reload of a file broken on lines 3 and 12 said %q, want line 3's problem first", detail)
	}
	if st := r.Status(); len(st) != 2 || st[0].Name != "gone" || st[1].Outflow.String() != "1/h" {
		t.Fatalf("after a refused reload: %+v, want the policies unchanged", st)
	}

	// A good file: changed, added and removed policies, queued jobs kept.
	write(`
policies:
  - name: slow
    outflow: 2/h
    queue: 20
  - name: new
    outflow: 5/s
    queue: 3
`)
	rep, err := r.Reload(ctx)
	if err != nil {
		t.Fatalf("Reload = %v", err)
	}
	if len(rep.Added) != 1 || rep.Added[0] != "new" || len(rep.Removed) != 1 || rep.Removed[0] != "gone" ||
		len(rep.Changed) != 1 || !strings.Contains(rep.Changed[0], "outflow 1/h → 2/h") || !strings.Contains(rep.Changed[0], "queue 10 → 20") {
		t.Fatalf("Reload report = %+v", rep)
	}
	// The removed policy's jobs are not lost, but nothing shows them any
	// more: the report says so (a tour found only the log did).
	if len(rep.Warnings) != 1 || !strings.HasPrefix(rep.Warnings[0], "gone: removed with 2 queued jobs: they stay in JetStream") {
		t.Errorf("Reload report's warnings = %q, want one saying gone left 2 queued jobs", rep.Warnings)
	}
	// And so does GET /v1/policies, until it is served again (a tour's
	// operator, who reloaded by SIGHUP, saw no trace of them but the log).
	api, err := client.New(r.base, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if removed, err := api.Removed(ctx); err != nil || len(removed) != 1 || removed[0].Name != "gone" || removed[0].Queued != 2 {
		t.Errorf("removed policies = %+v, %v; want gone with 2 queued", removed, err)
	}
	if d := r.Depths(ctx, "slow")["k"]; d != 4 {
		t.Errorf("queued jobs of slow after the reload = %d, want 4 kept", d)
	}
	st := r.Status()
	if len(st) != 2 || st[0].Name != "new" || st[1].Outflow.String() != "2/h" || st[1].Queue != 20 {
		t.Errorf("after the reload: %+v", st)
	}
	if a := r.post(t, "new", "k", []byte("x")); a.code != http.StatusAccepted {
		t.Errorf("POST to the added policy = %d %v, want 202", a.code, a.body)
	}
	if a := r.post(t, "gone", "k", []byte("x")); a.code != http.StatusNotFound {
		t.Errorf("POST to the removed policy = %d %v, want 404", a.code, a.body)
	}
	// The same file again changes nothing; a live override outlives a reload.
	if code, _ := r.put(t, "/v1/policies/new", `{"outflow": "7/s"}`); code != http.StatusOK {
		t.Fatalf("PUT new = %d", code)
	}
	write(strings.Replace(readFile(t, file), "outflow: 5/s", "outflow: 6/s", 1))
	rep, err = r.Reload(ctx)
	if err != nil || len(rep.Changed) != 0 || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "override") {
		t.Errorf("Reload with an override in place = %+v, %v; want the change refused with a warning", rep, err)
	}
	if rep.Unchanged != 2 {
		t.Errorf("Reload with an override in place: %d policies unchanged, want both (one by the file, one kept by its override)", rep.Unchanged)
	}
	if st := r.Status(); st[0].Outflow.String() != "7/s" {
		t.Errorf("outflow of new after the reload = %s, want the override's 7/s", st[0].Outflow)
	}
	waitFor(t, "the added policy drained", 5*time.Second, func() bool { return r.Status()[0].Delivered == 1 })
	// Served again, gone is no longer listed as removed.
	write(readFile(t, file) + "  - name: gone\n    outflow: 1/h\n    queue: 3\n")
	if _, err := r.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if removed, err := api.Removed(ctx); err != nil || len(removed) != 0 {
		t.Errorf("removed policies after gone came back = %+v, %v; want none", removed, err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A change that applies only at a restart (partitions, the delivery
// target) is warned of on every reload while the file differs from what
// runs, and no longer once the file is put back: the warning compares with
// the running policy, not with the file read before.
func TestReloadRestartWarningFollowsTheRunningPolicy(t *testing.T) {
	file := filepath.Join(t.TempDir(), "policies.yaml")
	write := func(parts string) {
		t.Helper()
		yaml := "policies:\n  - name: p\n    outflow: 5/s\n    queue: 3\n    partitions: " + parts + "\n"
		if err := os.WriteFile(file, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("4")
	set, err := policies.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	r := wrap(t, testenv.Shaper(t, shaper.Config{Policies: set, PolicyFile: file}))
	const warning = "p: the number of partitions changed: restart every shaper to apply it"
	for i, tc := range []struct {
		parts string
		warn  bool
	}{{"2", true}, {"2", true}, {"4", false}, {"4", false}} {
		write(tc.parts)
		rep, err := r.Reload(context.Background())
		if err != nil {
			t.Fatalf("reload %d: %v", i+1, err)
		}
		if warned := slices.Contains(rep.Warnings, warning); warned != tc.warn {
			t.Errorf("reload %d (partitions %s, 4 running): warnings %q; want the restart warning: %v", i+1, tc.parts, rep.Warnings, tc.warn)
		}
		// The status says it too, until the restart or the file put back
		// (a tour found no trace of it once the reload's answer was gone).
		want := []string(nil)
		if tc.warn {
			want = []string{"partitions 4 → " + tc.parts}
		}
		if len(want) > 0 && !slices.Equal(rep.RestartPending, []string{"p: " + want[0]}) {
			t.Errorf("reload %d: report's restart_pending %q, want p's %q", i+1, rep.RestartPending, want)
		}
		if got := r.Status()[0].RestartPending; !slices.Equal(got, want) {
			t.Errorf("reload %d (partitions %s, 4 running): status restart_pending %q, want %q", i+1, tc.parts, got, want)
		}
	}
}
