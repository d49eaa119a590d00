package controller

import (
	"github.com/musterhq/muster/api"
	"github.com/prometheus/client_golang/prometheus"
)

// AgentStats returns what agents have cost this controller's API so far:
// requests to the agent endpoints and heartbeat batches written.
func (c *Controller) AgentStats() api.AgentStats { return c.api.AgentStats() }

// Metrics returns the controller's Prometheus registry (what /metrics
// serves), for in-process readers such as the bench.
func (c *Controller) Metrics() prometheus.Gatherer { return c.metricsReg }
