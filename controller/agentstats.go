package controller

import "github.com/musterhq/muster/api"

// AgentStats returns what agents have cost this controller's API so far:
// requests to the agent endpoints and heartbeat batches written.
func (c *Controller) AgentStats() api.AgentStats { return c.api.AgentStats() }
