package controller

import (
	"sync"
	"time"

	"github.com/musterhq/muster/provisioner"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the controller's Prometheus metrics (DESIGN §4), all kept
// by the provisioners: machines by status too, so a scrape costs the same
// whatever the number of machines and never reads the store (S7). A model
// whose provisioner runs on another controller sharing the store is
// reported by that controller.
type metrics struct {
	machines    *machineCounts
	calls       *prometheus.CounterVec
	callSeconds *prometheus.HistogramVec
	provisioned *prometheus.HistogramVec
	queued      *prometheus.GaugeVec
	workers     *prometheus.GaugeVec
	harvested   *prometheus.CounterVec
	throttles   *prometheus.CounterVec
	rate        *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		machines: &machineCounts{
			byModel: map[string]map[provisioner.MachineKey]int{},
			desc: prometheus.NewDesc("muster_machines",
				"Machines by model, machine status and instance status.",
				[]string{"model", "status", "instance_status"}, nil),
		},
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "muster_provider_calls_total", Help: "Provider calls by model, kind and outcome.",
		}, []string{"model", "kind", "outcome"}),
		callSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "muster_provider_call_seconds", Help: "Provider call latency by model and kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}, []string{"model", "kind"}),
		provisioned: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "muster_provisioning_seconds", Help: "Time from queueing a start to its record or error.",
			Buckets: prometheus.ExponentialBuckets(0.01, 4, 9),
		}, []string{"model", "outcome"}),
		queued: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "muster_provision_queue_depth", Help: "Start and stop jobs waiting for a worker.",
		}, []string{"model"}),
		workers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "muster_provision_workers", Help: "Size of the provisioner's worker pool.",
		}, []string{"model"}),
		harvested: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "muster_harvested_instances_total", Help: "Instances stopped by harvesting, by kind (dead, unknown, duplicate).",
		}, []string{"model", "kind"}),
		throttles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "muster_provider_throttles_total", Help: "Provider calls refused by the cloud's rate limit.",
		}, []string{"model", "kind"}),
		rate: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "muster_provider_rate_limit", Help: "Current client-side provider call rate, per second.",
		}, []string{"model"}),
	}
	reg.MustRegister(m.machines, m.calls, m.callSeconds, m.provisioned, m.queued, m.workers, m.harvested, m.throttles, m.rate)
	return m
}

// observer returns the provisioner.Observer of one model.
func (m *metrics) observer(model string) provisioner.Observer { return modelObserver{m, model} }

// forget drops a removed model's series.
func (m *metrics) forget(model string) {
	m.machines.set(model, nil)
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{m.calls, m.callSeconds, m.provisioned, m.queued, m.workers, m.harvested, m.throttles, m.rate} {
		v.DeletePartialMatch(prometheus.Labels{"model": model})
	}
}

type modelObserver struct {
	m     *metrics
	model string
}

func (o modelObserver) ProviderCall(kind, outcome string, d time.Duration) {
	o.m.calls.WithLabelValues(o.model, kind, outcome).Inc()
	o.m.callSeconds.WithLabelValues(o.model, kind).Observe(d.Seconds())
}

func (o modelObserver) Provisioned(ok bool, d time.Duration) {
	outcome := "ok"
	if !ok {
		outcome = "error"
	}
	o.m.provisioned.WithLabelValues(o.model, outcome).Observe(d.Seconds())
}

func (o modelObserver) Queue(queued, workers int) {
	o.m.queued.WithLabelValues(o.model).Set(float64(queued))
	o.m.workers.WithLabelValues(o.model).Set(float64(workers))
}

func (o modelObserver) Harvested(kind string, n int) {
	o.m.harvested.WithLabelValues(o.model, kind).Add(float64(n))
}

func (o modelObserver) Throttled(kind string, rate float64) {
	o.m.throttles.WithLabelValues(o.model, kind).Inc()
	o.m.rate.WithLabelValues(o.model).Set(rate)
}

func (o modelObserver) Machines(counts map[provisioner.MachineKey]int) {
	o.m.machines.set(o.model, counts)
}

// machineCounts is muster_machines{model, status, instance_status}: the
// counts each model's provisioner last reported.
type machineCounts struct {
	desc    *prometheus.Desc
	mu      sync.Mutex
	byModel map[string]map[provisioner.MachineKey]int
}

// set replaces a model's counts; nil drops the model.
func (c *machineCounts) set(model string, counts map[provisioner.MachineKey]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if counts == nil {
		delete(c.byModel, model)
		return
	}
	c.byModel[model] = counts
}

func (c *machineCounts) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *machineCounts) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for model, counts := range c.byModel {
		for k, n := range counts {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), model, string(k.Status), string(k.InstanceStatus))
		}
	}
}
