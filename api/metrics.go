package api

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/musterhq/muster"
)

// MachineCollector exposes muster_machines{model, status, instance_status}:
// the number of machines of each model by machine status and instance
// status, read from the store at scrape time.
type MachineCollector struct {
	store   muster.Store
	logger  *slog.Logger
	timeout time.Duration
	desc    *prometheus.Desc
}

var _ prometheus.Collector = (*MachineCollector)(nil)

// NewMachineCollector returns a collector over store; register it with a
// prometheus.Registry. logger may be nil.
func NewMachineCollector(store muster.Store, logger *slog.Logger) *MachineCollector {
	if logger == nil {
		logger = slog.Default()
	}
	return &MachineCollector{
		store:   store,
		logger:  logger,
		timeout: 10 * time.Second,
		desc: prometheus.NewDesc("muster_machines",
			"Machines by model, machine status and instance status.",
			[]string{"model", "status", "instance_status"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *MachineCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *MachineCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	models, err := c.store.Models(ctx)
	if err != nil {
		c.logger.Warn("collect machine metrics", "err", err)
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	type key struct{ status, instStatus string }
	for _, m := range models {
		ms, err := c.store.Machines(ctx, m.UUID, nil)
		if err != nil {
			c.logger.Warn("collect machine metrics", "model", m.Name, "err", err)
			ch <- prometheus.NewInvalidMetric(c.desc, err)
			continue
		}
		counts := map[key]int{}
		for _, mc := range ms {
			counts[key{string(mc.Status), string(mc.InstanceStatus)}]++
		}
		for k, n := range counts {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), m.Name, k.status, k.instStatus)
		}
	}
}
