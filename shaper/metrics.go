package shaper

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// metric is one Prometheus series family drawn from PolicyStatus.
type metric struct {
	name, kind, help string
	value            func(PolicyStatus) float64
}

var metrics = []metric{
	{"shaper_jobs_admitted_total", "counter", "Jobs accepted into a queue (202).", func(p PolicyStatus) float64 { return float64(p.Admitted) }},
	{"shaper_jobs_duplicate_total", "counter", "Resubmissions answered from the duplicate window.", func(p PolicyStatus) float64 { return float64(p.Duplicates) }},
	{"shaper_jobs_rejected_total", "counter", "Jobs refused because their key's queue was full (429).", func(p PolicyStatus) float64 { return float64(p.Rejected) }},
	{"shaper_jobs_limited_total", "counter", "Submissions refused by the admission limit (429).", func(p PolicyStatus) float64 { return float64(p.Limited) }},
	{"shaper_jobs_shadow_limited_total", "counter", "Submissions a shadow admission limit would have refused.", func(p PolicyStatus) float64 { return float64(p.Shadow) }},
	{"shaper_limiter_errors_total", "counter", "Admission decisions the limiter backend failed.", func(p PolicyStatus) float64 { return float64(p.LimiterErrs) }},
	{"shaper_jobs_unavailable_total", "counter", "Submissions answered 503 because JetStream failed.", func(p PolicyStatus) float64 { return float64(p.Unavailable) }},
	{"shaper_jobs_delivered_total", "counter", "Jobs delivered downstream.", func(p PolicyStatus) float64 { return float64(p.Delivered) }},
	{"shaper_delivery_failures_total", "counter", "Failed delivery attempts.", func(p PolicyStatus) float64 { return float64(p.Failed) }},
	{"shaper_jobs_deferred_total", "counter", "Jobs kept in the deferred stream because their key's queue was full.", func(p PolicyStatus) float64 { return float64(p.Deferred) }},
	{"shaper_jobs_readmitted_total", "counter", "Deferred jobs moved into their key's queue.", func(p PolicyStatus) float64 { return float64(p.Readmitted) }},
	{"shaper_jobs_deferred", "gauge", "Jobs waiting in the deferred stream.", func(p PolicyStatus) float64 { return float64(p.DeferQueued) }},
	{"shaper_jobs_dead", "gauge", "Jobs in the dead-letter stream.", func(p PolicyStatus) float64 { return float64(p.Dead) }},
	{"shaper_draining", "gauge", "1 when this shaper holds the policy's drain lease.", func(p PolicyStatus) float64 {
		if p.Draining {
			return 1
		}
		return 0
	}},
	{"shaper_jobs_queued", "gauge", "Jobs queued over all keys.", func(p PolicyStatus) float64 { return float64(p.Queued) }},
	{"shaper_keys_active", "gauge", "Keys with jobs queued.", func(p PolicyStatus) float64 { return float64(p.Keys) }},
	{"shaper_deliveries_in_flight", "gauge", "Deliveries in progress.", func(p PolicyStatus) float64 { return float64(p.InFlight) }},
	{"shaper_outflow_per_second", "gauge", "Configured outflow rate per key.", func(p PolicyStatus) float64 { return p.Outflow.PerSecond() }},
	{"shaper_queue_size", "gauge", "Configured queue size per key.", func(p PolicyStatus) float64 { return float64(p.Queue) }},
}

// handleMetrics serves the policy figures in the Prometheus text format.
func (s *Shaper) handleMetrics(w http.ResponseWriter, r *http.Request) {
	st := s.policies.status(r.Context())
	var b strings.Builder
	family := func(name, kind, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
	}
	for _, m := range metrics {
		family(m.name, m.kind, m.help)
		for _, p := range st {
			fmt.Fprintf(&b, "%s{policy=%q} %s\n", m.name, p.Name, strconv.FormatFloat(m.value(p), 'g', -1, 64))
		}
	}
	if in, ok := s.ingress.NATSStats(); ok {
		for _, m := range []struct {
			name, kind, help string
			value            int64
		}{
			{"shaper_nats_ingress_pending", "gauge", "NATS submissions sent to JetStream and not yet answered.", in.Pending},
			{"shaper_nats_ingress_blocking", "gauge", "NATS submissions running on a goroutine of their own (admission limit, deferral).", in.Blocking},
			{"shaper_nats_ingress_backlog", "gauge", "NATS submissions received and not yet looked at.", in.Backlog},
			{"shaper_nats_ingress_dropped_total", "counter", "NATS submissions dropped unanswered because the backlog was full (the producer's request times out).", in.Dropped},
		} {
			family(m.name, m.kind, m.help)
			fmt.Fprintf(&b, "%s %d\n", m.name, m.value)
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	w.Write([]byte(b.String()))
}
