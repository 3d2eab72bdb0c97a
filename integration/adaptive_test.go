package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	sim "github.com/shaper-dev/shaper/drain/downstream"
)

// capacityHook is a webhook whose capacity changes over time, served as
// drain/downstream models it, in real time: a delivery waits for the work
// before it (what is offered beyond the capacity queues), then takes the
// base latency; the server does the work of a delivery whose caller gave
// up too. It logs when each delivery arrived.
type capacityHook struct {
	url     string
	start   time.Time
	phases  []sim.Phase // Capacity from After on, the first from 0
	latency time.Duration

	mu   sync.Mutex
	busy time.Time
	at   []time.Duration // arrivals, since start
}

func startCapacityHook(t *testing.T, start time.Time, phases []sim.Phase) *capacityHook {
	t.Helper()
	h := &capacityHook{start: start, phases: phases, latency: 20 * time.Millisecond}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		now := time.Now()
		h.mu.Lock()
		wait := max(h.busy.Sub(now), 0)
		h.busy = now.Add(wait).Add(time.Duration(float64(time.Second) / h.capacity(now)))
		h.at = append(h.at, now.Sub(h.start))
		h.mu.Unlock()
		select {
		case <-time.After(wait + h.latency):
		case <-r.Context().Done():
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	h.url = "http://" + ln.Addr().String() + "/"
	return h
}

func (h *capacityHook) capacity(now time.Time) float64 {
	c := h.phases[0].Capacity
	for _, p := range h.phases {
		if now.Sub(h.start) >= p.After {
			c = p.Capacity
		}
	}
	return c
}

// mostIn returns the most arrivals in any window of length w within [from, to).
func (h *capacityHook) mostIn(from, to, w time.Duration) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	most := 0
	for i, j := 0, 0; i < len(h.at); i++ {
		for h.at[j] < h.at[i]-w+1 {
			j++
		}
		if h.at[i] >= from && h.at[i] < to {
			most = max(most, i-j+1)
		}
	}
	return most
}

// livePoint is what GET /v1/policies said at one instant.
type livePoint struct {
	at                time.Duration
	rate              float64 // the adaptive total's effective rate (0: none)
	reason            string  // why
	delivered, failed uint64
}

// The step test against the real binary: two policies of one shaper, each
// 20 keys at 5/s under a 50/s total, POST to a webhook whose capacity goes
// 50/s → 20/s → 50/s, the one adaptive (per: policy), the other fixed.
// Producers keep every key backlogged. The adaptive total comes within
// 10 % of the capacity within 50 s of each step (30 s on a virtual clock:
// TestAdaptStep, TestAdaptStepStarted; live, the latency's noise on a
// loaded machine makes the law back off near a capacity equal to its
// ceiling, and the step up has taken 23–45 s) and stays there, its
// deliveries fail under 1 % at steady state, and the webhook sees no more
// of them in a second than of the fixed pace's (51, give or take the
// arrivals' jitter); the fixed one's failures are shown beside it.
func TestAdaptLiveStep(t *testing.T) {
	const settleLive = 50 * time.Second
	needBinaries(t)
	const phase = 60 * time.Second
	capacities := []float64{50, 20, 50}
	phases := []sim.Phase{{Capacity: 50}, {After: phase, Capacity: 20}, {After: 2 * phase, Capacity: 50}}
	start := time.Now().Add(15 * time.Second) // the shaper starts meanwhile
	hooks := map[string]*capacityHook{"adaptive": startCapacityHook(t, start, phases), "fixed": startCapacityHook(t, start, phases)}
	yaml := "policies:\n"
	for name, h := range hooks {
		adapt := ""
		if name == "adaptive" {
			adapt = ", adapt: {per: policy}"
		}
		yaml += fmt.Sprintf("  - {name: %s, outflow: 5/s, total: 50/s, queue: 50, deliver: {webhook: %q, timeout: 1s}%s}\n", name, h.url, adapt)
	}
	cfg := embeddedShaper(t, yaml)
	startShaper(t, cfg)
	if wait := time.Until(start); wait > 0 {
		time.Sleep(wait)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*phase)
	defer cancel()
	sub := newSubmitter(cfg.httpAddr, 10*time.Second)
	var wg sync.WaitGroup
	for name := range hooks {
		wg.Go(func() { // 60/s over 20 keys: more than the total, so every key stays backlogged
			tick := time.NewTicker(time.Second / 60)
			defer tick.Stop()
			for i := 0; ctx.Err() == nil; i++ {
				<-tick.C
				sub.api.Submit(ctx, name, fmt.Sprintf("k%d", i%20), []byte("x"))
			}
		})
	}
	points := map[string][]livePoint{}
	for ctx.Err() == nil {
		time.Sleep(500 * time.Millisecond)
		all, err := policyStates(cfg.httpAddr)
		if err != nil {
			continue
		}
		at := time.Since(start)
		for name := range hooks {
			p := all[name]
			pt := livePoint{at: at, delivered: p.Delivered, failed: p.Failed}
			if p.Adapting != nil && p.Adapting.Policy != nil {
				pt.rate, pt.reason = p.Adapting.Policy.Rate, p.Adapting.Policy.Reason.String()
			}
			points[name] = append(points[name], pt)
		}
	}
	cancel()
	wg.Wait()
	for i, p := range points["adaptive"] {
		if i%4 == 0 {
			t.Logf("%5.1fs  %5.1f/s  %s", p.at.Seconds(), p.rate, p.reason)
		}
	}

	for i, capacity := range capacities {
		from, to := time.Duration(i)*phase, time.Duration(i+1)*phase
		ps := points["adaptive"]
		settled := -1
		for j := len(ps) - 1; j >= 0; j-- {
			if ps[j].at >= to {
				continue
			}
			if ps[j].at < from || ps[j].rate < 0.9*capacity || ps[j].rate > 1.1*capacity {
				break
			}
			settled = j
		}
		if settled < 0 {
			t.Errorf("phase %d (capacity %v/s): the adaptive rate never settled within 10 %%", i, capacity)
			continue
		}
		low, high := ps[settled].rate, ps[settled].rate
		last := settled
		for j := settled; j < len(ps) && ps[j].at < to; j++ {
			low, high, last = min(low, ps[j].rate), max(high, ps[j].rate), j
		}
		failed := func(ps []livePoint, a, b int) (uint64, uint64) {
			return ps[b].failed - ps[a].failed, ps[b].delivered - ps[a].delivered + ps[b].failed - ps[a].failed
		}
		f, n := failed(ps, settled, last)
		fixed := points["fixed"]
		ff, fn := failed(fixed, settled, last)
		most, fixedMost := hooks["adaptive"].mostIn(from, to, time.Second), hooks["fixed"].mostIn(from, to, time.Second)
		t.Logf("capacity %2.0f/s: adaptive within 10 %% after %v, then %.1f–%.1f/s; failed %d of %d attempts; at most %d in 1 s · fixed: failed %d of %d, at most %d in 1 s",
			capacity, (ps[settled].at - from).Round(100*time.Millisecond), low, high, f, n, most, ff, fn, fixedMost)
		// The virtual-clock tests hold the 30 s; live, on a loaded
		// machine, the latency's noise makes it slower.
		if ps[settled].at-from > settleLive {
			t.Errorf("phase %d: settled after %v, want within %v", i, ps[settled].at-from, settleLive)
		}
		if f*100 >= max(n, 1) {
			t.Errorf("phase %d: %d of %d attempts failed at steady state, want under 1 %%", i, f, n)
		}
		// The drain starts at most 51 in a second (the virtual-clock tests
		// check it exactly), and the adapted rate never passes the total.
		// Arrivals at the webhook jitter with the machine's load, for the
		// fixed pace as much but not in the same second: one suite run saw
		// 55 arrive in a second after a 4.4× latency stall, the rate at
		// most 50/s throughout. A stall of 100 ms bunches 5 deliveries.
		for _, p := range ps {
			if p.at >= from && p.at < to && p.rate > 50 {
				t.Errorf("phase %d: the adapted rate was %.1f/s at %v, over the total of 50/s", i, p.rate, p.at.Round(100*time.Millisecond))
				break
			}
		}
		if most > max(fixedMost, 51)+5 {
			t.Errorf("phase %d: %d deliveries arrived in one second, the fixed 50/s pace's at most %d", i, most, fixedMost)
		}
	}
}
