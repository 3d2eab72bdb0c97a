package ui_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/policies"
	"github.com/shaper-dev/shaper/shaper"
	"github.com/shaper-dev/shaper/shaper/client"
)

const token = "ui-test-token"

// TestOperatorPage drives the operator page in headless Chromium against a
// real shaper under load: it logs in with the admin token, checks the
// figures the page shows against GET /v1/policies, tunes a policy through
// the form's confirmation and sees the delivered rate follow on the API and
// on the page, shows and replays a dead letter, resets the policy, and
// takes screenshots at 1,280 px and at a phone's size. Any console error or
// uncaught exception fails it.
func TestOperatorPage(t *testing.T) {
	var hookFails atomic.Bool
	hookFails.Store(true)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hookFails.Load() {
			http.Error(w, "downstream down", http.StatusInternalServerError)
		}
	}))
	t.Cleanup(hook.Close)
	sh := testenv.Shaper(t, shaper.Config{AdminToken: token, Policies: testenv.Policies(t, fmt.Sprintf(`
policies:
  - name: orders
    outflow: 10/s
    queue: 40
  - name: bulk
    outflow: 5/s
    queue: 10
    overflow: defer
    partitions: 4
  - name: hooks
    outflow: 20/s
    queue: 10
    deliver: {webhook: %q, timeout: 2s}
    retry: {attempts: 1, backoff: 10ms}
  - name: tenants
    outflow: 5/s
    queue: 10
    adapt: {per: key}
  - name: idle
    outflow: 1/s
    queue: 5
    deliver: {subject: unconsumed.idle}
  - name: once
    outflow: 1/s
    queue: 5
`, hook.URL))})
	testenv.Consume(t, sh.NATSURL(), "shaper.out.>") // the downstream workers: each delivery is answered
	base := "http://" + sh.HTTPAddr()
	api, err := client.New(base, client.Config{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// Without the token the page's data is refused; the page itself loads.
	for path, want := range map[string]int{"/v1/ui/series": http.StatusUnauthorized, "/ui/": http.StatusOK, "/ui/app.js": http.StatusOK} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a token = %d, want %d", path, resp.StatusCode, want)
		}
	}

	load := startLoad(ctx, t, api)
	defer load()
	for i := range 2 {
		if _, err := api.Submit(ctx, "hooks", "h"+strconv.Itoa(i), []byte("payload of hooks job "+strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := api.Submit(ctx, "idle", "i", []byte("nobody takes this")); err != nil {
		t.Fatal(err)
	}

	b := newBrowser(t, 1280, 900)
	b.do("open the page", chromedp.Navigate(base+"/ui"), chromedp.WaitVisible(chromedp.CSS("#login")))
	b.screenshot("operator-page-login.png")
	b.do("log in",
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`#login-form button[type="submit"]`)),
		chromedp.WaitVisible(card("orders", `[data-figure="admitted"] .value`)),
	)
	b.waitFor("a few polls and the delivered rate of orders",
		`+document.body.dataset.polls >= 3 && document.querySelector('[data-policy="orders"] path.s-delivered').getAttribute('d').length > 0`,
		15*time.Second)
	b.waitFor("the dead letters of hooks", `document.querySelectorAll('[data-policy="hooks"] .letters li[data-seq]').length == 2`, 15*time.Second)
	// once delivers its only job: its time in queue is shown, then, once
	// 10 s old, no longer (a tour read a figure 3 minutes old as now's).
	if _, err := api.Submit(ctx, "once", "o", []byte("the only job of once")); err != nil {
		t.Fatal(err)
	}
	onceSub := `document.querySelector('[data-policy="once"] [data-figure="in_queue"] .sub').textContent`
	b.waitFor("once's time in queue", onceSub+`.startsWith('p50')`, 15*time.Second)
	b.waitFor("once's time in queue gone stale", onceSub+` == 'nothing delivered lately'`, 30*time.Second)

	checkFigures(t, b, api)

	// An adaptive outflow's effective rate has a line of the rates chart;
	// a fixed one has none.
	b.waitFor("the adapted rate's legend on tenants only", `!document.querySelector('[data-policy="tenants"] [data-chart="rates"] li.s-rate').hidden &&
		document.querySelector('[data-policy="orders"] [data-chart="rates"] li.s-rate').hidden`, 15*time.Second)

	// Who drains what: the lone shaper drains orders whole and bulk's 4
	// partitions, and the badge's title names it.
	b.waitFor("bulk's partitions on its badge", `document.querySelector('[data-policy="bulk"] .badge.drain').textContent == 'drains 4 of 4 partitions here' &&
		document.querySelector('[data-policy="bulk"] .badge.drain').title.split('\n').length == 4`, 15*time.Second)
	if got := eval[string](b, `document.querySelector('[data-policy="orders"] .badge.drain').title`); !strings.HasPrefix(got, "drained by ") {
		t.Errorf("orders' drain badge says %q on hover, want the shaper draining it", got)
	}

	// Nobody subscribes to idle's subject: its card says so, with the
	// subject on hover; orders, consumed, has no such badge.
	b.waitFor("idle's consumer badge", `!document.querySelector('[data-policy="idle"] .badge.consumer').hidden &&
		document.querySelector('[data-policy="orders"] .badge.consumer').hidden`, 15*time.Second)
	if got := eval[string](b, `document.querySelector('[data-policy="idle"] .badge.consumer').title`); !strings.Contains(got, "nobody answers this shaper's deliveries on unconsumed.idle.>") {
		t.Errorf("idle's consumer badge says %q on hover, want the subject nobody answers on", got)
	}

	// Settings and rate as the file says: 3 busy keys at 10/s.
	if got := eval[string](b, `document.querySelector('[data-policy="orders"] input[name="outflow"]').value`); got != "10/s" {
		t.Errorf("outflow field = %q, want 10/s", got)
	}
	if r := deliveredRate(ctx, t, api, "orders"); r < 20 || r > 40 {
		t.Errorf("orders delivered %.1f jobs/s before tuning, want about 30 (3 keys at 10/s)", r)
	}

	tune(t, b, api)

	// The rate follows: 3 keys at 20/s, on the API and on the page.
	deadline := time.Now().Add(15 * time.Second)
	for r := 0.0; r < 45; r = deliveredRate(ctx, t, api, "orders") {
		if time.Now().After(deadline) {
			t.Fatalf("orders delivered %.1f jobs/s after tuning to 20/s, want about 60", r)
		}
	}
	b.waitFor("the delivered rate on the page to reach 45/s",
		`parseFloat(document.querySelector('[data-policy="orders"] [data-chart="rates"] li.s-delivered .v').textContent) >= 45`, 15*time.Second)
	b.waitFor("the deepest keys of orders", `document.querySelectorAll('[data-policy="orders"] .deepest tbody tr').length == 3`, 15*time.Second)
	b.screenshot("operator-page-1280.png")

	deadLetters(t, b, api, &hookFails)
	reset(t, b, api)

	// A phone: one column, nothing wider than the screen.
	b.do("phone viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2), chromedp.EmulateMobile, chromedp.EmulateTouch))
	polls := eval[int](b, `+document.body.dataset.polls`)
	b.waitFor("a poll at phone size", fmt.Sprintf(`+document.body.dataset.polls > %d`, polls+1), 10*time.Second)
	if w := eval[int](b, `document.documentElement.scrollWidth`); w > 390 {
		t.Errorf("page width at 390 px = %d px: it scrolls sideways", w)
	}
	b.screenshot("operator-page-phone.png")
	b.checkConsole()
}

// startLoad submits jobs until ctx ends or the returned stop is called:
// three keys of orders kept full (each submission again after the 429's
// Retry-After), and bulk at 10 jobs/s over its 5/s (deferred).
func startLoad(ctx context.Context, t *testing.T, api *client.Client) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	submit := func(policy, key string, pause func(client.Result) time.Duration) {
		for n := 0; ctx.Err() == nil; n++ {
			res, err := api.Submit(ctx, policy, key, []byte(fmt.Sprintf("%s %s %d", policy, key, n)))
			wait := 50 * time.Millisecond
			if err == nil {
				wait = pause(res)
			} else if ctx.Err() == nil {
				t.Errorf("submit to %s: %v", policy, err)
			}
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
	}
	full := func(r client.Result) time.Duration {
		if r.Outcome == client.OutcomeAccepted {
			return 0
		}
		return min(r.RetryAfter, 100*time.Millisecond)
	}
	for _, k := range []string{"k0", "k1", "k2"} {
		wg.Go(func() { submit("orders", k, full) })
	}
	wg.Go(func() { submit("bulk", "b0", func(client.Result) time.Duration { return 100 * time.Millisecond }) })
	return func() {
		cancel()
		wg.Wait()
	}
}

// deliveredRate measures a policy's delivered jobs per second over 2 s
// from GET /v1/policies.
func deliveredRate(ctx context.Context, t *testing.T, api *client.Client, policy string) float64 {
	t.Helper()
	p0, err := api.Policy(ctx, policy)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(2 * time.Second)
	p1, err := api.Policy(ctx, policy)
	if err != nil {
		t.Fatal(err)
	}
	return float64(p1.Delivered-p0.Delivered) / time.Since(t0).Seconds()
}

// pageFigure reads a figure's exact value as the page shows it.
func pageFigure(b *browser, policy, figure string) uint64 {
	b.t.Helper()
	sel := fmt.Sprintf(`[data-policy=%q] [data-figure=%q] .value`, policy, figure)
	v := eval[string](b, `document.querySelector(`+strconv.Quote(sel)+`).dataset.value`)
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		b.t.Fatalf("%s's %s on the page = %q: %v", policy, figure, v, err)
	}
	return n
}

// checkFigures checks the page's counters against GET /v1/policies: read
// from a poll that started after a first answer, they lie between it and
// an answer read afterwards.
func checkFigures(t *testing.T, b *browser, api *client.Client) {
	t.Helper()
	ctx := context.Background()
	before, err := api.Policies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	polls := eval[int](b, `+document.body.dataset.polls`)
	b.waitFor("two more polls", fmt.Sprintf(`+document.body.dataset.polls >= %d`, polls+2), 10*time.Second)
	page := map[string]map[string]uint64{}
	figures := []string{"admitted", "rejected", "deferred", "delivered", "failed", "dead"}
	for _, p := range before {
		page[p.Name] = map[string]uint64{}
		for _, f := range figures {
			page[p.Name][f] = pageFigure(b, p.Name, f)
		}
	}
	after, err := api.Policies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range before {
		a := after[i]
		for _, f := range figures {
			lo, hi := counter(p, f), counter(a, f)
			if got := page[p.Name][f]; got < lo || got > hi {
				t.Errorf("%s's %s on the page = %d, want between %d and %d (GET /v1/policies before and after)", p.Name, f, got, lo, hi)
			}
		}
	}
	if got := page["orders"]["admitted"]; got == 0 {
		t.Errorf("orders admitted on the page = 0 under load")
	}
	// Deferred means something only for a policy that defers.
	if shown := eval[bool](b, `!document.querySelector('[data-policy="orders"] [data-figure="deferred"]').hidden`); shown {
		t.Errorf("orders (overflow: reject, nothing deferred) shows a deferred figure")
	}
	if shown := eval[bool](b, `!document.querySelector('[data-policy="bulk"] [data-figure="deferred"]').hidden`); !shown {
		t.Errorf("bulk (overflow: defer) shows no deferred figure")
	}
}

func counter(p client.Policy, figure string) uint64 {
	return map[string]uint64{"admitted": p.Admitted, "rejected": p.Rejected, "deferred": p.Deferred,
		"delivered": p.Delivered, "failed": p.Failed, "dead": p.Dead}[figure]
}

// tune sets orders' outflow to 20/s through the form and its confirmation.
func tune(t *testing.T, b *browser, api *client.Client) {
	t.Helper()
	b.do("type the new outflow and review it",
		chromedp.Evaluate[chromedp.Void](`(() => { const i = document.querySelector('[data-policy="orders"] input[name="outflow"]'); i.focus(); i.select(); })()`),
		chromedp.SendKeys(card("orders", `input[name="outflow"]`), "20/s"),
		chromedp.Click(card("orders", `button.review`)),
		chromedp.WaitVisible(card("orders", `.tune .confirm`)),
	)
	if got := eval[string](b, `document.querySelector('[data-policy="orders"] .tune .confirm .diff').textContent`); got != "outflow: 10/s → 20/s" {
		t.Errorf("confirmation lists %q, want only outflow: 10/s → 20/s", got)
	}
	// Nothing is applied before the confirmation.
	if p, err := api.Policy(context.Background(), "orders"); err != nil || p.Outflow.String() != "10/s" {
		t.Fatalf("orders before confirming = %v, %v; want outflow 10/s", p.Outflow, err)
	}
	b.screenshot("operator-page-confirm.png")
	b.do("confirm", chromedp.Click(card("orders", `.tune .confirm button.apply`)))
	b.waitFor("the change applied", `document.querySelector('[data-policy="orders"] .tune .result').textContent.startsWith('Applied')`, 10*time.Second)
	p, err := api.Policy(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if p.Outflow != (policies.Rate{N: 20, Per: time.Second}) || !p.Override || p.Queue != 40 {
		t.Errorf("orders after the form = outflow %v, queue %d, override %v; want 20/s, 40, true", p.Outflow, p.Queue, p.Override)
	}
	b.waitFor("the override marks", `!document.querySelector('[data-policy="orders"] .badge.override').hidden &&
		document.querySelector('[data-policy="orders"] [data-field="outflow"]').classList.contains('overridden') &&
		document.querySelector('[data-policy="orders"] [data-field="outflow"] .mark b').textContent == '10/s' &&
		!document.querySelector('[data-policy="orders"] [data-field="queue"]').classList.contains('overridden')`, 5*time.Second)
}

// deadLetters shows a dead letter of hooks, then replays its key once the
// webhook answers again.
func deadLetters(t *testing.T, b *browser, api *client.Client, hookFails *atomic.Bool) {
	t.Helper()
	ctx := context.Background()
	b.do("show a dead letter",
		chromedp.Click(card("hooks", `.letters li[data-seq] button.show`)),
		chromedp.WaitVisible(card("hooks", `.letter`)),
	)
	key := eval[string](b, `document.querySelector('[data-policy="hooks"] .letters li[data-seq] code').textContent`)
	if got, want := eval[string](b, `document.querySelector('[data-policy="hooks"] .letter .payload').textContent`), "payload of hooks job "+key[1:]; got != want {
		t.Errorf("dead letter payload on the page = %q, want %q", got, want)
	}
	before, err := api.Policy(ctx, "hooks")
	if err != nil {
		t.Fatal(err)
	}
	hookFails.Store(false)
	b.do("replay its key",
		chromedp.Click(card("hooks", `.letters li[data-seq] button.replay`)),
		chromedp.WaitVisible(card("hooks", `.dead .confirm`)),
		chromedp.Click(card("hooks", `.dead .confirm button.apply`)),
	)
	b.waitFor("the replay", `document.querySelector('[data-policy="hooks"] .dead .result').textContent.startsWith('Replayed 1 of 1')`, 10*time.Second)
	b.waitFor("one dead letter left on the page", `document.querySelector('[data-policy="hooks"] [data-figure="dead"] .value').dataset.value == '1'`, 10*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		p, err := api.Policy(ctx, "hooks")
		if err != nil {
			t.Fatal(err)
		}
		if p.Delivered > before.Delivered && p.Dead == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hooks after replaying key %s: delivered %d (was %d), dead %d; want one more delivered, 1 dead", key, p.Delivered, before.Delivered, p.Dead)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// reset takes orders back to its file through the form.
func reset(t *testing.T, b *browser, api *client.Client) {
	t.Helper()
	b.do("reset orders",
		chromedp.Click(card("orders", `button.reset`)),
		chromedp.WaitVisible(card("orders", `.tune .confirm`)),
	)
	if got := eval[string](b, `document.querySelector('[data-policy="orders"] .tune .confirm .diff').textContent`); got != "outflow: 20/s → 10/s" {
		t.Errorf("reset confirmation lists %q, want outflow: 20/s → 10/s", got)
	}
	b.do("confirm the reset", chromedp.Click(card("orders", `.tune .confirm button.apply`)))
	b.waitFor("the reset applied", `document.querySelector('[data-policy="orders"] .tune .result').textContent.startsWith('Reset')`, 10*time.Second)
	p, err := api.Policy(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if p.Outflow.String() != "10/s" || p.Override {
		t.Errorf("orders after reset = outflow %v, override %v; want 10/s, false", p.Outflow, p.Override)
	}
	b.waitFor("the override marks gone", `document.querySelector('[data-policy="orders"] .badge.override').hidden &&
		!document.querySelector('[data-policy="orders"] [data-field="outflow"]').classList.contains('overridden')`, 5*time.Second)
}
