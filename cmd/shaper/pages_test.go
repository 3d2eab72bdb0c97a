package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

// deferred list and dead list print a page and the hint for the next, go
// on from a cursor, and follow every page with --all.
func TestListCommandsPage(t *testing.T) {
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError) // every delivery fails
	}))
	defer hook.Close()
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, fmt.Sprintf(`
policies:
  - name: later
    outflow: 10/s
    queue: 1
    overflow: defer
  - name: hooks
    outflow: 100/s
    queue: 10
    retry: {attempts: 1, backoff: 10ms, max_backoff: 10ms}
    deliver: {webhook: %q}
`, hook.URL))})
	addr := s.HTTPAddr()
	api := newAPI(t, addr)
	// Nobody consumes later's deliveries: its first job stays, the next
	// five are deferred behind it.
	for i := range 6 {
		if _, err := api.Submit(t.Context(), "later", "k", []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if _, err := api.Submit(t.Context(), "hooks", fmt.Sprint("h", i), nil); err != nil {
			t.Fatal(err)
		}
	}

	out, errOut, err := runCLI(t, "deferred", "list", "--http", addr, "--policy", "later", "--limit", "2")
	more := regexp.MustCompile(`--after (\S+)`).FindStringSubmatch(errOut)
	if err != nil || strings.Count(out, "\nlater ") != 2 || !strings.Contains(errOut, "2 deferred jobs") || more == nil {
		t.Fatalf("deferred list --limit 2 = %q %q, %v; want 2 rows, then the count and the next page's --after", out, errOut, err)
	}
	out, _, err = runCLI(t, "deferred", "list", "--http", addr, "--policy", "later", "--limit", "2", "--after", more[1])
	if err != nil || strings.Count(out, "\nlater ") != 2 || !regexp.MustCompile(`(?m)^later +3 `).MatchString(out) {
		t.Errorf("deferred list --after = %q, %v; want rows 3 and 4", out, err)
	}
	out, errOut, err = runCLI(t, "deferred", "list", "--http", addr, "--limit", "2", "--all")
	if err != nil || strings.Count(out, "\nlater ") != 5 || strings.Contains(errOut, "--after") {
		t.Errorf("deferred list --all = %q %q, %v; want the 5 rows and no next page", out, errOut, err)
	}
	out, _, err = runCLI(t, "deferred", "list", "--http", addr, "--limit", "4", "--json")
	var page client.DeferredPage
	if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Deferred) != 4 || page.Next == "" {
		t.Errorf("deferred list --json = %q, %v; want a page of 4 with its next", out, err)
	}
	// Past its next try, the first says so, and why it still waits: no
	// consumer.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, _, err := runCLI(t, "deferred", "list", "--http", addr, "--policy", "later", "--limit", "1")
		if err == nil && strings.Contains(out, "WHY") && strings.Contains(out, "(past)") && strings.Contains(out, "waiting for a consumer since") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deferred list after the first job's next try = %q, %v; want its next try (past), WHY: waiting for a consumer since …", out, err)
		}
	}
	if _, _, err := runCLI(t, "deferred", "list", "--http", addr, "--limit", "1001"); exitCode(err) != 2 || !strings.Contains(err.Error(), "1 to 1000") {
		t.Errorf("deferred list --limit 1001 = %v, want refused", err)
	}
	if _, _, err := runCLI(t, "deferred", "list", "--http", addr, "--after", "!"); exitCode(err) != 2 || !strings.Contains(err.Error(), "not a cursor of this listing") {
		t.Errorf("deferred list --after ! = %v (exit %d), want the shaper's refusal, exit 2", err, exitCode(err))
	}

	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, errOut, err = runCLI(t, "dead", "list", "--http", addr, "--limit", "1", "--all")
		if err == nil && strings.Count(out, "\nhooks ") == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("dead list --limit 1 --all = %q %q, %v; want the 3 dead letters", out, errOut, err)
		}
	}
	if _, errOut, err := runCLI(t, "dead", "list", "--http", addr, "--limit", "1"); err != nil || !strings.Contains(errOut, "more: the next page is shaper dead list --after ") {
		t.Errorf("dead list --limit 1 = %q, %v; want the next page's hint", errOut, err)
	}
}
