package ui_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/shaper-dev/shaper/internal/testenv"
)

// browser is a headless Chromium tab driven over the DevTools protocol
// (chromedp), with every console error and uncaught exception of its page
// kept for the test to fail on.
type browser struct {
	t   *testing.T
	ctx context.Context // the tab's; the browser lives until the test ends

	mu       sync.Mutex
	problems []string
}

// newBrowser starts Chromium with a window of width×height CSS pixels and
// opens a tab.
func newBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(testenv.Chromium(t)),
		chromedp.WindowSize(width, height),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.DisableGPU,
	)
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses to run as root with its sandbox
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Do(ctx); err != nil { // starts the browser, without a timeout
		t.Fatalf("chromium: %v", err)
	}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			b.console(m)
		}
	}()
	return b
}

// console keeps an error or an exception as a problem and logs the rest.
func (b *browser) console(m chromedp.ConsoleMessage) {
	if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException || m.Type == "assert" {
		b.mu.Lock()
		b.problems = append(b.problems, fmt.Sprintf("%s: %s (%s:%d)", m.Type, m.Text, m.URL, m.Line))
		b.mu.Unlock()
		return
	}
	b.t.Logf("console %s: %s", m.Type, m.Text)
}

// checkConsole fails the test on any console error or uncaught exception
// so far.
func (b *browser) checkConsole() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.problems {
		b.t.Errorf("page console: %s", p)
	}
	b.problems = nil
}

// do runs steps, failing the test after 20 s or on an error.
func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.checkConsole()
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval returns the value of a JavaScript expression.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor waits until the JavaScript expression is true, for at most
// timeout, and fails the test with what otherwise.
func (b *browser) waitFor(what, expr string, timeout time.Duration) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, timeout+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(timeout)))
	if err != nil {
		b.checkConsole()
		b.t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

// screenshot saves the whole page as a PNG among the test's artifacts and
// logs where.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`)); err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(testenv.Artifacts(b.t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	b.t.Logf("screenshot: %s", path)
}

// card returns the CSS selector of a policy's card, followed by sel.
func card(policy, sel string) chromedp.CSS {
	return chromedp.CSS(fmt.Sprintf(`[data-policy=%q] %s`, policy, sel))
}
