package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

// dead replay says each dead letter's new job id, and the old id's status
// then names it, on every shaper of the cluster alike; the new job is
// delivered.
func TestDeadReplayNamesTheNewJob(t *testing.T) {
	var up atomic.Bool
	got := make(chan string, 10)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		got <- r.Header.Get("Shaper-Job-Id")
	}))
	defer hook.Close()
	set := testenv.Policies(t, fmt.Sprintf(`
policies:
  - name: hooks
    outflow: 20/s
    queue: 10
    retry: {attempts: 2, backoff: 50ms, max_backoff: 100ms}
    deliver: {webhook: %q}
`, hook.URL))
	ns := testenv.NATS(t)
	a := testenv.Shaper(t, shaper.Config{Policies: set, NATSURL: ns.ClientURL(), InstanceID: "a"})
	b := testenv.Shaper(t, shaper.Config{Policies: set, NATSURL: ns.ClientURL(), InstanceID: "b"})
	apiA, apiB := newAPI(t, a.HTTPAddr()), newAPI(t, b.HTTPAddr())
	res, err := apiA.Submit(t.Context(), "hooks", "k", []byte("payload"))
	if err != nil || res.Outcome != client.OutcomeAccepted {
		t.Fatalf("submit = %+v, %v", res, err)
	}
	old := res.ID
	waitJob(t, apiB, old, client.JobDead)

	up.Store(true)
	out, _, err := runCLI(t, "dead", "replay", "--http", a.HTTPAddr(), "--policy", "hooks")
	m := regexp.MustCompile(`(?m)^hooks (\d+): job (\S+) → (\S+)\n1 matched, 1 replayed\n$`).FindStringSubmatch(out)
	if err != nil || m == nil || m[2] != old || m[3] == old {
		t.Fatalf("dead replay = %q, %v; want the line hooks SEQ: job %s → NEW-ID, then 1 matched, 1 replayed", out, err, old)
	}
	replayedAs := m[3]
	// The other shaper answers the old id alike, at once.
	for _, api := range []*client.Client{apiB, apiA} {
		j, err := api.Job(t.Context(), old)
		if err != nil || j.Status != client.JobReplayed || j.ReplayedAs != replayedAs || j.Reason == "" {
			t.Errorf("GET /v1/jobs/%s = %+v, %v; want status replayed, replayed_as %s and the reason it died", old, j, err, replayedAs)
		}
	}
	select {
	case id := <-got:
		if id != replayedAs {
			t.Errorf("delivered job %s, want the replayed job %s", id, replayedAs)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the replayed job was never delivered")
	}
	waitJob(t, apiB, replayedAs, client.JobDelivered)
}

// waitJob waits until api says job id has status want.
func waitJob(t *testing.T, api *client.Client, id string, want client.JobStatus) {
	t.Helper()
	var j client.Job
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if j, err = api.Job(t.Context(), id); err == nil && j.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s: %+v, %v; want status %s", id, j, err, want)
		}
	}
}

// A key with a control character is shown quoted, as it can be typed again;
// two keys that differ only there stay apart (both were "a?b").
func TestPrintableKeys(t *testing.T) {
	for in, want := range map[string]string{
		"orders-7":  "orders-7",
		"a\tb":      `"a\tb"`,
		"a\nb":      `"a\nb"`,
		"a\x7fb":    `"a\x7fb"`,
		`"quoted"`:  `"\"quoted\""`,
		"naïve key": "naïve key",
		"a\u2028b":  `"a\u2028b"`,
		"a\u0085b":  `"a\u0085b"`,
	} {
		if got := printable(in); got != want {
			t.Errorf("printable(%q) = %s, want %s", in, got, want)
		}
	}
}
