package ui_test

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
)

// TestRootOpensOperatorPage opens the shaper's bare address in headless
// Chromium, as a new user does, and lands on the operator page, not on a
// 404 problem. Over HTTP the root is a temporary redirect, for GET and
// HEAD alike; the page behind it keeps its own guard.
func TestRootOpensOperatorPage(t *testing.T) {
	sh := testenv.Shaper(t, shaper.Config{AdminToken: token, Policies: testenv.Policies(t, "policies:\n  - {name: orders, outflow: 10/s, queue: 40}\n")})
	base := "http://" + sh.HTTPAddr()

	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		req, err := http.NewRequest(method, base+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
			t.Errorf("%s / = %d Location %q, want 302 to /ui/", method, resp.StatusCode, resp.Header.Get("Location"))
		}
	}
	// Only the root: a path under it is still unknown.
	resp, err := http.Get(base + "/nothing-here")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /nothing-here = %d, want 404", resp.StatusCode)
	}
	// A file the page does not have is a 404 problem too, as every other
	// (the file server's was text/plain); the page's own files are served.
	for path, want := range map[string]int{"/ui/nothing.js": http.StatusNotFound, "/ui/app.js": http.StatusOK, "/ui/": http.StatusOK} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want || want == 404 && resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("GET %s = %d (%s), want %d", path, resp.StatusCode, resp.Header.Get("Content-Type"), want)
		}
	}

	b := newBrowser(t, 1280, 900)
	b.do("open the shaper's address", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#login")))
	if path := eval[string](b, "location.pathname"); path != "/ui/" {
		t.Errorf("the browser is at %q, want /ui/", path)
	}
	b.checkConsole()
}
