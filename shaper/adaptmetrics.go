package shaper

import (
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

const adaptRateDesc = "Effective rate of an adaptive outflow, per second: of the policy's total (per: policy; no key label) " +
	"or of one of its five deepest keys (per: key), with the reason that set it (latency, timeouts, throttled, failures, " +
	"probing, recovering, unused, at_ceiling). The ceiling is shaper_outflow_per_second (or the total)."

// observeAdapting observes the effective rates of p's adaptive outflow,
// if it has one.
func observeAdapting(o metric.Observer, g metric.Float64ObservableGauge, p PolicyStatus) {
	a := p.Adapting
	if a == nil {
		return
	}
	policy := attribute.String("policy", p.Name)
	if st := a.Policy; st != nil {
		o.ObserveFloat64(g, st.Rate, metric.WithAttributes(policy, attribute.String("reason", st.Reason.Kind.String())))
	}
	for _, k := range a.Keys {
		o.ObserveFloat64(g, k.Rate, metric.WithAttributes(policy, attribute.String("key", k.Key), attribute.String("reason", k.Reason.Kind.String())))
	}
}

// adaptedRate returns the effective rate of line's adaptive outflow for
// the operator page's chart: the total's, or the deepest adapting key's;
// NaN without one.
func adaptedRate(line *served) float64 {
	if line.Gate.Policy().Adapt == nil {
		return math.NaN()
	}
	a := line.Drain.Adapting(1)
	switch {
	case a == nil:
		return math.NaN()
	case a.Policy != nil:
		return a.Policy.Rate
	case len(a.Keys) > 0:
		return a.Keys[0].Rate
	}
	return math.NaN()
}
