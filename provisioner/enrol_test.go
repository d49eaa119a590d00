package provisioner_test

import (
	"encoding/json"
	"testing"

	"github.com/musterhq/muster"
)

// enrollingProvider is batchProvider whose batches enrol (SPEC §4).
type enrollingProvider struct{ *batchProvider }

var _ muster.BatchEnroller = enrollingProvider{}

func (enrollingProvider) EnrolsBatches() bool { return true }

// SPEC §4: the starts of a batch that enrols carry one batch token and no
// machine's nonce or password; the token's hash is recorded for exactly
// the batch's machines, so each recorded instance can enrol with it once.
// A BatchStarter that does not enrol keeps per-machine configs.
func TestBatchEnrolmentParams(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	bp := enrollingProvider{&batchProvider{recProvider: h.prov}}
	h.start2(bp)
	h.add(8, muster.MachineTemplate{Placement: "zone=a"})
	h.waitFor("8 machines running", allRunning(h, 8))
	token := ""
	for _, batch := range bp.batchCalls() {
		for _, p := range batch {
			var cfg muster.AgentConfig
			if err := json.Unmarshal(p.UserData, &cfg); err != nil {
				t.Fatalf("machine %s: %v", p.MachineID, err)
			}
			if !cfg.Enrolling() || cfg.Nonce != "" || p.Password != "" || cfg.Machine != p.MachineID {
				t.Fatalf("machine %s: start params %+v with config %+v: want an enrolment config of the machine, no password or nonce", p.MachineID, p, cfg)
			}
			if token != "" && cfg.EnrolToken != token {
				t.Fatalf("two tokens in one zone's batch")
			}
			token = cfg.EnrolToken
		}
	}
	if token == "" {
		t.Fatal("no batch start made")
	}
	ms, err := h.store.Machines(h.ctx, h.model.UUID, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		out, err := h.store.Enrol(h.ctx, h.model.UUID, []muster.Enrolment{{MachineID: m.ID, InstanceID: m.InstanceID(), Token: token, PasswordHash: muster.HashSecret("pw")}})
		if err != nil || out[0].Err != nil || out[0].Machine.ID != m.ID || out[0].Machine.Nonce != m.Nonce {
			t.Fatalf("enrol machine %s with the batch token: got %+v, %v", m.ID, out, err)
		}
	}
}

func TestBatchWithoutEnrolmentKeepsConfigs(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	bp := &batchProvider{recProvider: h.prov}
	h.start2(bp)
	h.add(4, muster.MachineTemplate{Placement: "zone=a"})
	h.waitFor("4 machines running", allRunning(h, 4))
	if len(bp.batchCalls()) == 0 {
		t.Fatal("no batch start made")
	}
	for _, batch := range bp.batchCalls() {
		for _, p := range batch {
			var cfg muster.AgentConfig
			err := json.Unmarshal(p.UserData, &cfg)
			if err != nil || cfg.Enrolling() || cfg.Password == "" || cfg.Password != p.Password {
				t.Fatalf("machine %s: got %+v, %v; want its own agent config", p.MachineID, cfg, err)
			}
		}
	}
}
