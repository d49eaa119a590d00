package sim

import (
	"context"
	"net/http"
	"net/url"

	"github.com/musterhq/muster"
)

// Scripting of simulated agents (R1, R2): a share of new instances whose
// agent never boots (Faults.AgentBootFailureRate), and one instance's agent
// stopped while the instance runs (StopAgent).

// AgentBoots draws whether an instance's simulated agent boots, from
// Faults.AgentBootFailureRate. Safe for concurrent use.
func (c *Cloud) AgentBoots() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	rate := c.faults.AgentBootFailureRate
	return rate <= 0 || c.rnd.Float64() >= rate
}

// StopAgent stops the simulated agent of a running instance (Config.
// OnAgentStop): it stops heartbeating and its machine goes down, while the
// instance keeps running. ENotFound for an instance the cloud does not run.
func (c *Cloud) StopAgent(id string) error {
	c.mu.Lock()
	inst := c.instances[id]
	running := inst != nil && (inst.State == "" || inst.State == "running")
	c.mu.Unlock()
	if !running {
		return muster.Errorf(muster.ENotFound, "sim has no running instance %q", id)
	}
	if c.onAgentStop != nil {
		c.onAgentStop(id)
	}
	return nil
}

func (s *server) adminStopAgent(w http.ResponseWriter, r *http.Request) {
	if err := s.c.StopAgent(r.PathValue("id")); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

// StopAgent stops the simulated agent of a running instance.
func (c *Client) StopAgent(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/v1/admin/instances/"+url.PathEscape(id)+"/stop-agent", nil, nil)
}
