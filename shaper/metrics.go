package shaper

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"github.com/shaper-dev/shaper/queue"
	"github.com/shaper-dev/shaper/shaper/internal/jobtrace"
)

// Bucket bounds of the shaper's histograms, in seconds.
var (
	// queueBuckets: time in queue, from a few milliseconds to a day (a
	// deferred job may wait that long).
	queueBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 21600, 86400}
	// latenessBuckets: how late a delivery started after its slot; a
	// healthy drain stays under a few milliseconds.
	latenessBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5}
	// deliveryBuckets: one delivery attempt, up to a slow webhook's timeout.
	deliveryBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
)

// metrics is a Shaper's OpenTelemetry meter provider and the Prometheus
// registry /metrics serves from: the OTel instruments through the OTel
// Prometheus exporter, the Go runtime and process collectors beside them.
// The figures of each policy are observed from memory at collection
// (gate counts, drainer stats, the dead letters' cached counts): a scrape
// costs no JetStream request.
type metrics struct {
	provider *sdkmetric.MeterProvider
	meter    metric.Meter
	handler  http.Handler

	queueTime, lateness, delivery metric.Float64Histogram

	mu       sync.Mutex
	policies map[string]metric.MeasurementOption // the attribute set {policy=name}
}

// newMetrics makes the meter provider: the Prometheus exporter over a
// private registry, and readers (an OTLP exporter's, say).
func newMetrics(res *resource.Resource, readers []sdkmetric.Reader) (*metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, err
	}
	if res == nil {
		res = resource.NewSchemaless(semconv.ServiceName("shaper"))
	}
	opts := []sdkmetric.Option{sdkmetric.WithResource(res), sdkmetric.WithReader(exporter)}
	for _, r := range readers {
		opts = append(opts, sdkmetric.WithReader(r))
	}
	m := &metrics{
		provider: sdkmetric.NewMeterProvider(opts...),
		handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}),
		policies: make(map[string]metric.MeasurementOption),
	}
	m.meter = m.provider.Meter(jobtrace.Scope)
	histogram := func(name, desc string, buckets []float64) metric.Float64Histogram {
		h, e := m.meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		err = errors.Join(err, e)
		return h
	}
	m.queueTime = histogram("shaper.queue.duration", "Time a delivered job waited in its queue: the start of its delivery − enqueued (a deferred job's wait included).", queueBuckets)
	m.lateness = histogram("shaper.drain.lateness", "How late a delivery attempt started after its slot: started − scheduled.", latenessBuckets)
	m.delivery = histogram("shaper.delivery.duration", "Duration of one delivery attempt, by outcome (ok, failed, waiting: no consumer answered yet).", deliveryBuckets)
	return m, err
}

// policy returns the attribute set {policy=name} as a measurement option.
func (m *metrics) policy(name string) metric.MeasurementOption {
	m.mu.Lock()
	defer m.mu.Unlock()
	opt, ok := m.policies[name]
	if !ok {
		opt = metric.WithAttributeSet(attribute.NewSet(attribute.String("policy", name)))
		m.policies[name] = opt
	}
	return opt
}

// gauge is one figure of a policy observed at collection.
type gauge struct {
	name, desc string
	counter    bool
	value      func(PolicyStatus) float64
}

// policyFigures are the figures of every policy, observed from its
// PolicyStatus. Counters are exported with a _total suffix.
var policyFigures = []gauge{
	{"shaper.jobs.admitted", "Jobs accepted into a queue (202).", true, func(p PolicyStatus) float64 { return float64(p.Admitted) }},
	{"shaper.jobs.duplicate", "Resubmissions answered from the duplicate window, or found there at re-admission.", true, func(p PolicyStatus) float64 { return float64(p.Duplicates) }},
	{"shaper.jobs.rejected", "Jobs refused because their key's queue was full (429).", true, func(p PolicyStatus) float64 { return float64(p.Rejected) }},
	{"shaper.jobs.limited", "Submissions refused by the admission limit (429).", true, func(p PolicyStatus) float64 { return float64(p.Limited) }},
	{"shaper.jobs.shadow_limited", "Submissions a shadow admission limit would have refused.", true, func(p PolicyStatus) float64 { return float64(p.Shadow) }},
	{"shaper.limiter.errors", "Admission decisions the limiter backend failed.", true, func(p PolicyStatus) float64 { return float64(p.LimiterErrs) }},
	{"shaper.jobs.unavailable", "Submissions answered 503 because JetStream failed.", true, func(p PolicyStatus) float64 { return float64(p.Unavailable) }},
	{"shaper.jobs.delivered", "Jobs delivered downstream.", true, func(p PolicyStatus) float64 { return float64(p.Delivered) }},
	{"shaper.delivery.failures", "Failed delivery attempts.", true, func(p PolicyStatus) float64 { return float64(p.Failed) }},
	{"shaper.jobs.deferred", "Jobs kept in the deferred stream because their key's queue was full.", true, func(p PolicyStatus) float64 { return float64(p.Deferred) }},
	{"shaper.retries", "Delivery attempts that retried a failed job: the retry budget's use.", true, func(p PolicyStatus) float64 { return float64(p.Retries) }},
	{"shaper.retries.deferred", "Slots in which a due retry gave way to a fresh job because the key's retry budget was spent.", true, func(p PolicyStatus) float64 { return float64(p.RetriesHeld) }},
	{"shaper.jobs.stepped_aside", "Failed jobs waiting for a retry while their key's fresh jobs go on.", false, func(p PolicyStatus) float64 { return float64(p.Aside) }},
	{"shaper.retry.budget", "Share of a key's slots that retries may take (0: off, 1: unlimited).", false, func(p PolicyStatus) float64 { return p.Retry.Budget.Share() }},
	{"shaper.jobs.readmitted", "Deferred jobs moved into their key's queue.", true, func(p PolicyStatus) float64 { return float64(p.Readmitted) }},
	{"shaper.jobs.deferred_queued", "Jobs waiting in the deferred stream.", false, func(p PolicyStatus) float64 { return float64(p.DeferQueued) }},
	{"shaper.jobs.dead", "Jobs in the dead-letter stream.", false, func(p PolicyStatus) float64 { return float64(p.Dead) }},
	{"shaper.draining", "1 when this shaper holds the drain lease of the policy or of one of its partitions.", false, func(p PolicyStatus) float64 { return bool01(p.Draining) }},
	{"shaper.partitions", "Partitions the policy is drained in (its partitions field).", false, func(p PolicyStatus) float64 { return float64(p.Partitions) }},
	{"shaper.partitions.draining", "Partitions of the policy this shaper drains: summed over the shapers, the policy's partitions when each has one drainer.", false, func(p PolicyStatus) float64 { return float64(len(p.DrainingPartitions)) }},
	{"shaper.override", "1 when the policy has a live override (fields set live over the policy file).", false, func(p PolicyStatus) float64 { return bool01(p.Override) }},
	{"shaper.jobs.queued", "Jobs queued over all keys.", false, func(p PolicyStatus) float64 { return float64(p.Queued) }},
	{"shaper.jobs.queued.draining", "Jobs queued in the partitions this shaper drains (sum over the shapers).", false, func(p PolicyStatus) float64 { return float64(p.QueuedDraining) }},
	{"shaper.keys.active", "Keys with jobs queued.", false, func(p PolicyStatus) float64 { return float64(p.Keys) }},
	{"shaper.deliveries.in_flight", "Deliveries in progress.", false, func(p PolicyStatus) float64 { return float64(p.InFlight) }},
	{"shaper.outflow.per_second", "Configured outflow rate per key.", false, func(p PolicyStatus) float64 { return p.Outflow.PerSecond() }},
	{"shaper.queue.size", "Configured queue size per key.", false, func(p PolicyStatus) float64 { return float64(p.Queue) }},
	{"shaper.total.per_second", "Configured total cap over the policy's keys, 0 for none.", false, func(p PolicyStatus) float64 { return p.Total.PerSecond() }},
	{"shaper.concurrency.key", "Deliveries of one key awaiting their receipt at once, at most.", false, func(p PolicyStatus) float64 { return float64(p.Concurrency.Key) }},
	{"shaper.concurrency.total", "Deliveries of the policy awaiting their receipt at once, at most; 0 for no bound.", false, func(p PolicyStatus) float64 { return float64(p.Concurrency.Total) }},
}

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// observe registers the callback that observes every policy's figures and
// the NATS ingress's from s's memory at each collection.
func (m *metrics) observe(s *Shaper) error {
	var insts []metric.Observable
	var errs []error
	figures := make([]metric.Float64Observable, len(policyFigures))
	for i, g := range policyFigures {
		var err error
		if g.counter {
			figures[i], err = m.meter.Float64ObservableCounter(g.name, metric.WithDescription(g.desc))
		} else {
			figures[i], err = m.meter.Float64ObservableGauge(g.name, metric.WithDescription(g.desc))
		}
		errs = append(errs, err)
		insts = append(insts, figures[i])
	}
	adaptRate, err := m.meter.Float64ObservableGauge("shaper.adapt.rate", metric.WithDescription(adaptRateDesc))
	errs = append(errs, err)
	insts = append(insts, adaptRate)
	intGauge := func(name, desc string, opts ...metric.Int64ObservableGaugeOption) metric.Int64ObservableGauge {
		g, err := m.meter.Int64ObservableGauge(name, append(opts, metric.WithDescription(desc))...)
		errs = append(errs, err)
		insts = append(insts, g)
		return g
	}
	pending := intGauge("shaper.nats_ingress.pending", "NATS submissions sent to JetStream and not yet answered.")
	blocking := intGauge("shaper.nats_ingress.blocking", "NATS submissions running on a goroutine of their own (admission limit, deferral).")
	backlog := intGauge("shaper.nats_ingress.backlog", "NATS submissions received and not yet looked at.")
	dropped, err := m.meter.Int64ObservableCounter("shaper.nats_ingress.dropped", metric.WithDescription("NATS submissions dropped unanswered because the backlog was full (the producer's request times out)."))
	errs = append(errs, err)
	insts = append(insts, dropped)
	storageGauge := func(name, desc string) metric.Int64ObservableGauge {
		return intGauge(name, desc, metric.WithUnit("By"))
	}
	storeUsed := storageGauge("shaper.jetstream.storage.used", "What JetStream's store holds, as this shaper counts it: read every 250 ms, with its own jobs stored and being stored since.")
	storeLimit := storageGauge("shaper.jetstream.storage.limit", "JetStream's store limit the shaper refuses jobs by (the embedded --max-store, or the account's limit); absent when no limit is visible.")
	storeKept := storageGauge("shaper.jetstream.storage.kept", "The last part of the store limit kept for the shapers' own writes: jobs are refused (503) once used reaches limit - kept.")
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_, err = m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		for _, p := range s.policies.status(ctx) {
			opt := m.policy(p.Name)
			for i, g := range policyFigures {
				o.ObserveFloat64(figures[i], g.value(p), opt)
			}
			observeAdapting(o, adaptRate, p)
		}
		if used, limit, known := s.reserve.Room(); known {
			o.ObserveInt64(storeUsed, used)
			o.ObserveInt64(storeLimit, limit)
			o.ObserveInt64(storeKept, queue.ReserveFor(limit))
		} else if used > 0 {
			o.ObserveInt64(storeUsed, used)
		}
		if in, ok := s.ingress.NATSStats(); ok {
			o.ObserveInt64(pending, in.Pending)
			o.ObserveInt64(blocking, in.Blocking)
			o.ObserveInt64(backlog, in.Backlog)
			o.ObserveInt64(dropped, in.Dropped)
		}
		return nil
	}, insts...)
	return err
}

// shutdownMetrics flushes and stops the metric readers (an OTLP exporter's
// last export), bounded by the shutdown timeout.
func (s *Shaper) shutdownMetrics() {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := s.metrics.provider.Shutdown(ctx); err != nil {
		s.log.Warn("metrics shutdown", "err", err)
	}
}

// handleMetrics serves GET /metrics: the Prometheus text format.
func (s *Shaper) handleMetrics(w http.ResponseWriter, r *http.Request) {
	s.metrics.handler.ServeHTTP(w, r)
}
