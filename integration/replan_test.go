package integration

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/shaper/client"
)

// putPolicy changes policy name live on the shaper at addr with body, a
// JSON merge patch such as {"outflow":"10/s"}.
func putPolicy(t *testing.T, addr, name, body string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, "http://"+addr+"/v1/policies/"+name, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := apiHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		t.Fatalf("PUT /v1/policies/%s %s = %d: %s", name, body, res.StatusCode, b)
	}
}

// TestLiveRateChangeReplans: a live change of the outflow reaches the slot
// a key is waiting for at once. A key at 1/m that just delivered gets its
// next job within a second of the outflow being raised to 10/s; lowered
// back to 1/m right after a delivery, the key delivers nothing more for
// the next seconds; raised again, it goes on at once.
func TestLiveRateChangeReplans(t *testing.T) {
	needBinaries(t)
	w := startWebhook(t)
	cfg := embeddedShaper(t, fmt.Sprintf("policies:\n  - {name: live, outflow: 1/m, queue: 10, deliver: {webhook: %q}}\n", w.url))
	startShaper(t, cfg)
	sub := newSubmitter(cfg.httpAddr, 10*time.Second)
	var ids []string
	for range 3 {
		res, err := sub.api.Submit(t.Context(), "live", "k", []byte("x"))
		if err != nil || res.Outcome != client.OutcomeAccepted {
			t.Fatalf("submit: %+v, %v", res, err)
		}
		ids = append(ids, res.ID)
	}
	waitFor(t, 10*time.Second, "the first job", func() bool { _, ok := w.arrived(ids[0]); return ok })
	time.Sleep(200 * time.Millisecond) // the key now waits a minute for its next slot
	raised := time.Now()
	putPolicy(t, cfg.httpAddr, "live", `{"outflow":"10/s"}`)
	waitFor(t, 5*time.Second, "the second job after the raise", func() bool { _, ok := w.arrived(ids[1]); return ok })
	if at, _ := w.arrived(ids[1]); at.Sub(raised) > time.Second {
		t.Errorf("second job %v after the outflow was raised to 10/s, want within 1 s", at.Sub(raised))
	}
	waitFor(t, 5*time.Second, "the third job", func() bool { _, ok := w.arrived(ids[2]); return ok })

	// Lowered: right after a delivery, the next waits for the new rate.
	for range 2 {
		res, err := sub.api.Submit(t.Context(), "live", "k", []byte("x"))
		if err != nil || res.Outcome != client.OutcomeAccepted {
			t.Fatalf("submit: %+v, %v", res, err)
		}
		ids = append(ids, res.ID)
	}
	waitFor(t, 5*time.Second, "the fourth job", func() bool { _, ok := w.arrived(ids[3]); return ok })
	putPolicy(t, cfg.httpAddr, "live", `{"outflow":"1/m"}`)
	lowered := time.Now()
	time.Sleep(3 * time.Second)
	if at, ok := w.arrived(ids[4]); ok {
		t.Errorf("fifth job delivered %v after the outflow was lowered to 1/m, want none within 3 s", at.Sub(lowered))
	}
	raised = time.Now()
	putPolicy(t, cfg.httpAddr, "live", `{"outflow":"10/s"}`)
	waitFor(t, 5*time.Second, "the fifth job after the second raise", func() bool { _, ok := w.arrived(ids[4]); return ok })
	if at, _ := w.arrived(ids[4]); at.Sub(raised) > time.Second {
		t.Errorf("fifth job %v after the outflow was raised again, want within 1 s", at.Sub(raised))
	}
}
