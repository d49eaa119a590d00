package provisioner

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/musterhq/muster"
)

// enrolParams returns the start parameters of a batch whose instances
// enrol (SPEC §4): the batch's one-time enrolment token is recorded
// (hashed) for its machines, and each start's agent config carries that
// token instead of the machine's nonce and password, so that the user
// data the batch's instances share holds no machine's secret.
//
// The token is a keyed hash of the batch's launch tokens when passwords
// are derived (Config.PasswordKey), so a batch repeated after a crash
// sends the identical request (the cloud's idempotency token returns the
// instances of the first), else random.
func (p *Provisioner) enrolParams(ctx context.Context, js []*startJob) ([]muster.StartParams, error) {
	ids := make([]string, len(js))
	tokens := make([]string, len(js))
	for i, j := range js {
		ids[i], tokens[i] = j.id, j.token
	}
	token := p.batchToken(tokens)
	if err := p.cfg.Store.SetEnrolment(ctx, p.modelUUID, ids, muster.HashSecret(token)); err != nil {
		return nil, fmt.Errorf("record enrolment token: %w", err)
	}
	ps := make([]muster.StartParams, len(js))
	addrs := p.agentAddresses()
	for i, j := range js {
		ud, err := json.Marshal(muster.AgentConfig{
			Controller: p.cfg.ControllerUUID, Model: p.modelUUID, Machine: j.id,
			APIAddresses: addrs, CACert: p.cfg.CACert, EnrolToken: token,
		})
		if err != nil {
			return nil, fmt.Errorf("agent config: %w", err)
		}
		ps[i] = j.params
		ps[i].Password, ps[i].UserData = "", ud
	}
	return ps, nil
}

// batchToken returns the enrolment token of a batch with the given launch
// tokens.
func (p *Provisioner) batchToken(launchTokens []string) string {
	if p.cfg.PasswordKey == nil {
		return muster.NewSecret()
	}
	sorted := append([]string(nil), launchTokens...)
	sort.Strings(sorted)
	mac := hmac.New(sha256.New, p.cfg.PasswordKey)
	mac.Write([]byte("enrol\x00" + p.modelUUID))
	for _, t := range sorted {
		mac.Write([]byte("\x00" + t))
	}
	return hex.EncodeToString(mac.Sum(nil))
}
