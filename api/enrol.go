package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/auth"
)

// EnrolPath is where a batch-started agent enrols (SPEC §4).
const EnrolPath = "/v1/agent/enrol"

// EnrolRequest is what an agent of a batch start sends to enrol: the
// batch's one-time token from the shared user data, the machine its
// launch index names there, and its instance identity document with the
// cloud's signature, as the metadata service served them.
type EnrolRequest struct {
	Model     string `json:"model"`
	Machine   string `json:"machine"`
	Token     string `json:"token"`
	Document  string `json:"document"`
	Signature string `json:"signature"`
	// Report is the agent's first report (status, hardware, addresses;
	// not life), applied as SetAgentMachine would once the enrolment
	// opens a session: one request fewer per agent. Invalid, it refuses
	// the enrolment before anything changes.
	Report *AgentUpdate `json:"report,omitempty"`
}

// EnrolResult is the machine's credentials, handed out once: the agent
// then logs in with them.
type EnrolResult struct {
	Machine  string `json:"machine"`
	Nonce    string `json:"nonce"`
	Password string `json:"password"`
	// Session is a session opened for the agent, as its login would
	// (one request fewer per agent); absent when the machine cannot have
	// one (dead, no instance), for the agent's login to say why.
	Session *LoginResult `json:"session,omitempty"`
	// Reported says the request's Report was applied; Life is then the
	// machine's life as the enrolment found it. Not reported (no
	// session, or the write failed), the agent reports with
	// SetAgentMachine.
	Reported bool   `json:"reported,omitempty"`
	Life     string `json:"life,omitempty"`
}

// Enrol enrols a batch-started agent (POST EnrolPath). unauthorized for a
// bad signature, token or instance, conflict when the credentials were
// handed out already, unavailable while the instance is not recorded yet.
func (c *Client) Enrol(ctx context.Context, req EnrolRequest) (EnrolResult, error) {
	var out EnrolResult
	return out, c.Do(ctx, http.MethodPost, EnrolPath, req, &out)
}

// machineOrNone returns id when the model has that machine, else "" (an
// event names only a machine that exists).
func (s *Server) machineOrNone(ctx context.Context, model, id string) string {
	if _, err := s.store.Machine(ctx, model, id); err != nil {
		return ""
	}
	return id
}

func (s *Server) handleEnrol(w http.ResponseWriter, r *http.Request) {
	s.agentReqs.Add(1)
	if err := s.enrol(w, r); err != nil {
		s.fail(w, r, err)
	}
}

// enrol verifies the identity document with the certificate of the
// model's cloud, checks that the instance is the one recorded for the
// named machine, and lets the store hand out that machine's credentials
// once, with a fresh password (the one the provisioner made never left the
// controller). Every refusal is an event of the machine and counts as a
// failed credential check of the source (S9).
func (s *Server) enrol(w http.ResponseWriter, r *http.Request) error {
	if err := s.authFail.admit(r); err != nil {
		return err
	}
	var req EnrolRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	ctx := r.Context()
	if req.Model == "" || req.Machine == "" || req.Token == "" || req.Document == "" || req.Signature == "" {
		s.authFail.fail(r, "enrolment without model, machine, token or identity")
		return muster.Errorf(muster.EUnauthorized, "enrolment needs model, machine, token, document and signature")
	}
	var report *muster.MachineUpdate
	if req.Report != nil {
		if req.Report.Life != nil {
			return muster.Errorf(muster.EInvalid, "bad report: an enrolment's report may not set the life")
		}
		u, err := agentUpdate(*req.Report)
		if err != nil {
			return err
		}
		report = &u
	}
	m, err := s.models.get(ctx, s.store, s.clock, req.Model)
	if muster.IsCode(err, muster.ENotFound) {
		s.authFail.fail(r, "enrolment in an unknown model")
		return muster.Errorf(muster.EUnauthorized, "enrolment refused: unknown model")
	} else if err != nil {
		return err
	}
	refuse := func(machine string, err error) error {
		s.authFail.fail(r, "enrolment refused")
		s.logger.Warn("enrolment refused", "model", m.Name, "machine", machine, "err", err)
		s.appendEvents(ctx, []muster.Event{{ModelUUID: m.UUID, MachineID: machine, Actor: "enrol", Kind: "enrol-refused",
			Message: fmt.Sprintf("enrolment for machine %s refused: %s", req.Machine, muster.ErrorMessage(err))}})
		return err
	}
	if s.cfg.Runtime == nil {
		return muster.Errorf(muster.EUnavailable, "no instance identity certificate for model %s", m.Name)
	}
	cert, err := s.cfg.Runtime.IdentityCert(m.UUID)
	if err != nil {
		return err
	}
	id, err := auth.VerifyIdentity(cert, []byte(req.Document), req.Signature)
	if err != nil {
		return refuse(s.machineOrNone(ctx, m.UUID, req.Machine), muster.Errorf(muster.EUnauthorized, "enrolment refused: %s", muster.ErrorMessage(err)))
	}
	// The store checks the instance is the one recorded for the machine,
	// and the token, in the transaction that hands out the credentials;
	// the enrolment's events and the agent's first report are written in
	// it too (then, called in that transaction, says what they are).
	var session, reported bool
	then := func(mc muster.Machine) (*muster.MachineUpdate, []muster.Event) {
		evs := []muster.Event{{ModelUUID: m.UUID, MachineID: mc.ID, Actor: "enrol", Kind: "enrol",
			Message: fmt.Sprintf("instance %s enrolled as machine %s", id.InstanceID, mc.ID)}}
		// A machine that cannot have a session (dead, no instance) gets
		// none, for the agent's login to say why.
		session = mc.HasInstance() && mc.Life != muster.LifeDead
		reported = session && report != nil
		if !session {
			return nil, evs
		}
		evs = append(evs, loginEvent(m.UUID, mc.ID))
		if !reported {
			return nil, evs
		}
		u, es := agentChange(m.UUID, *report, mc)
		return &u, append(evs, es...)
	}
	password := muster.NewSecret()
	mc, err := s.agentWrites.enrol(ctx, m.UUID, muster.Enrolment{MachineID: req.Machine, InstanceID: id.InstanceID, Token: req.Token,
		PasswordHash: muster.HashSecret(password), Then: then})
	switch muster.ErrorCode(err) {
	case "":
	case muster.ENotFound:
		return refuse("", muster.Errorf(muster.EUnauthorized, "enrolment refused: no machine %q", req.Machine))
	case muster.EUnauthorized, muster.EConflict:
		return refuse(req.Machine, fmt.Errorf("enrolment refused: %w", err))
	default:
		return err
	}
	res := EnrolResult{Machine: mc.ID, Nonce: mc.Nonce, Password: password}
	if session {
		sess := s.openSession(m, mc, true) // the enrolment wrote it seen
		res.Session = &sess
	}
	if reported {
		res.Reported, res.Life = true, string(mc.Life)
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}
