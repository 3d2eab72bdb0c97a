package shaper_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/shaper-dev/shaper/internal/testenv"
	"github.com/shaper-dev/shaper/shaper"
)

// scrape reads base's /metrics with the Prometheus text parser.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return families
}

// series returns the metric of family name whose labels include want.
func series(families map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := families[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		for k, v := range want {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		return m
	}
	return nil
}

// /metrics is the OTel SDK's, through its Prometheus exporter: the policy
// figures, histograms of admission latency, time in queue, drain lateness
// and delivery duration, and the go_ and process_ families.
func TestMetricsExposition(t *testing.T) {
	r := start(t, `
policies:
  - name: paced
    outflow: 50/s
    queue: 100
`)
	wait := collect(t, r.nc, "shaper.out.paced.>")
	for i := range 5 {
		if a := r.post(t, "paced", "k", []byte(fmt.Sprint(i))); a.code != http.StatusAccepted {
			t.Fatalf("POST = %d", a.code)
		}
	}
	wait(5, 10*time.Second)
	var families map[string]*dto.MetricFamily
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// The drainer reports a delivery just after the sink returned.
		families = scrape(t, r.base)
		if m := series(families, "shaper_drain_lateness_seconds", map[string]string{"policy": "paced"}); m.GetHistogram().GetSampleCount() >= 5 || time.Now().After(deadline) {
			break
		}
	}
	policy := map[string]string{"policy": "paced"}
	for _, h := range []struct {
		name   string
		labels map[string]string
	}{
		{"shaper_admission_duration_seconds", map[string]string{"policy": "paced", "outcome": "accepted", "transport": "http"}},
		{"shaper_queue_duration_seconds", policy},
		{"shaper_drain_lateness_seconds", policy},
		{"shaper_delivery_duration_seconds", map[string]string{"policy": "paced", "outcome": "ok"}},
	} {
		if f := families[h.name]; f.GetType() != dto.MetricType_HISTOGRAM {
			t.Errorf("%s: type %v, want a histogram", h.name, f.GetType())
			continue
		}
		m := series(families, h.name, h.labels)
		if got := m.GetHistogram().GetSampleCount(); got != 5 {
			t.Errorf("%s%v count = %d, want 5", h.name, h.labels, got)
		}
		if n := len(m.GetHistogram().GetBucket()); n < 10 {
			t.Errorf("%s has %d buckets, want sensible ones (≥ 10)", h.name, n)
		}
	}
	// Time in queue: 5 jobs of one key at 50/s, so the last waited ~80 ms.
	if sum := series(families, "shaper_queue_duration_seconds", policy).GetHistogram().GetSampleSum(); sum < 0.1 || sum > 5 {
		t.Errorf("time in queue summed over 5 jobs = %.3fs, want about 0.2 s", sum)
	}
	for name, want := range map[string]float64{
		"shaper_jobs_admitted_total":  5,
		"shaper_jobs_delivered_total": 5,
		"shaper_jobs_dead":            0,
		"shaper_draining":             1,
		"shaper_queue_size":           100,
		"shaper_outflow_per_second":   50,
		"shaper_retry_budget":         0.2, // the default
		"shaper_retries_total":        0,
		"shaper_jobs_stepped_aside":   0,
	} {
		m := series(families, name, policy)
		if m == nil {
			t.Errorf("/metrics lacks %s%v", name, policy)
			continue
		}
		got := m.GetGauge().GetValue() + m.GetCounter().GetValue()
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for _, name := range []string{"go_goroutines", "go_gc_duration_seconds", "process_cpu_seconds_total", "process_resident_memory_bytes", "shaper_nats_ingress_pending"} {
		if families[name] == nil {
			t.Errorf("/metrics lacks the %s family", name)
		}
	}
}

// A scrape reads every policy's figures from memory: it costs no JetStream
// API request, however many policies there are.
func TestMetricsScrapeCostsNoJetStreamRequest(t *testing.T) {
	srv := testenv.NATS(t)
	var yaml strings.Builder
	yaml.WriteString("policies:\n")
	const policies = 20
	for i := range policies {
		fmt.Fprintf(&yaml, "  - name: p%d\n    outflow: 1/s\n    queue: 5\n", i)
	}
	s := testenv.Shaper(t, shaper.Config{Policies: testenv.Policies(t, yaml.String()), NATSURL: srv.ClientURL()})
	base := "http://" + s.HTTPAddr()
	apiRequests := func() uint64 {
		v, err := srv.Varz(nil)
		if err != nil {
			t.Fatal(err)
		}
		return v.JetStream.Stats.API.Total
	}
	scrape(t, base) // the first one makes the policies' attribute sets
	before := apiRequests()
	const scrapes = 5
	for range scrapes {
		if f := scrape(t, base); series(f, "shaper_jobs_dead", map[string]string{"policy": "p19"}) == nil {
			t.Fatal("/metrics lacks shaper_jobs_dead of p19")
		}
	}
	// The dead letters' counts are read again every few seconds in the
	// background (one request per policy): a scrape adds none.
	t.Logf("JetStream API requests during %d scrapes: %d", scrapes, apiRequests()-before)
	if got := apiRequests() - before; got >= policies {
		t.Errorf("%d scrapes of %d policies cost %d JetStream API requests, want none", scrapes, policies, got)
	}
}

// A submission refused as invalid counts alike over HTTP and NATS, before
// its gate (a body too large, a key that does not parse) as after it: HTTP
// counted a bad key and not a body too large, NATS the other way round. A
// 413 names its policy and key, as a submission's problems do.
func TestInvalidCountedAlike(t *testing.T) {
	r := start(t, "policies:\n  - {name: p, outflow: 1/s, queue: 5}\n", func(c *shaper.Config) { c.MaxPayload = 1024 })
	big := bytes.Repeat([]byte("x"), 2048)
	if a := r.post(t, "p", "k", big); a.code != http.StatusRequestEntityTooLarge || a.body["policy"] != "p" || a.body["key"] != "k" {
		t.Errorf("POST of 2048 bytes = %d %v, want 413 naming policy p and key k", a.code, a.body)
	}
	resp, err := http.Post(r.base+"/v1/jobs/p/%FF", "application/octet-stream", nil) // not UTF-8: a bad key
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, m := range []*nats.Msg{{Subject: "shaper.submit.p.k", Data: big}, {Subject: "shaper.submit.p.$SYS", Data: []byte("x")}} {
		reply, err := r.nc.RequestMsg(m, 5*time.Second)
		if err != nil || !bytes.Contains(reply.Data, []byte(`"status":"error"`)) {
			t.Errorf("NATS %s: %s, %v; want an error reply", m.Subject, reply.Data, err)
		}
	}
	families := scrape(t, r.base)
	for _, tr := range []string{"http", "nats"} {
		m := series(families, "shaper_admission_duration_seconds", map[string]string{"policy": "p", "outcome": "invalid", "transport": tr})
		if got := m.GetHistogram().GetSampleCount(); got != 2 {
			t.Errorf("invalid submissions over %s counted %d, want 2 (a body too large, a bad key)", tr, got)
		}
	}
}
