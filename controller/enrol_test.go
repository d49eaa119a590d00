package controller

import (
	"strings"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// SPEC §4 on the embedded sim: a batch's instances carry no machine's
// password or nonce in their user data; each simulated agent enrols with
// the batch token and its instance's signed identity, once, and its
// machine becomes started.
func TestSimAgentsEnrolBatch(t *testing.T) {
	ac := openAgentsController(t, Config{})
	ids := ac.addMachines(t, "default", api.AddMachinesRequest{Count: 6, Placement: "zone=a"})
	st := ac.waitMachines(t, "default", "started", ids, func(m api.MachineStatus) bool { return m.Status == string(muster.StatusStarted) })
	agents := ac.ctrl.runner(ac.modelUUID(t, "default")).provider.simAgents
	tokens := map[string]bool{}
	for _, id := range ids {
		ud := agents.cloud.UserData(st.Machines[id].InstanceID)
		cfg, err := muster.ParseAgentConfig(ud)
		if err != nil {
			t.Fatalf("user data of machine %s: %v", id, err)
		}
		if !cfg.Enrolling() || cfg.Nonce != "" || strings.Contains(string(ud), "password") {
			t.Fatalf("user data of machine %s: want an enrolment config without password or nonce: %s", id, ud)
		}
		tokens[cfg.EnrolToken] = true
	}
	if len(tokens) != 1 {
		t.Errorf("%d enrolment tokens among one zone's machines, want one batch token", len(tokens))
	}
	if n := countEvents(t, ac, "default", "enrol"); n != len(ids) {
		t.Errorf("%d enrol events, want %d", n, len(ids))
	}
	if n := countEvents(t, ac, "default", "enrol-refused"); n != 0 {
		t.Errorf("%d enrolments refused, want none", n)
	}
}
