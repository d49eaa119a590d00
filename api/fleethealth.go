package api

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/musterhq/muster"
)

// FleetRuntime is what a Runtime may offer for fleet health (SPEC R3–R5).
// It is optional: a Runtime without it reports no paused remediation and
// refuses rebalance and replacement as unavailable.
type FleetRuntime interface {
	// Remediation returns the groups of a model whose health remediation
	// is paused by the circuit breaker (R3); none for a model another
	// controller runs.
	Remediation(modelUUID string) []RemediationPause
	// Rebalance plans (and unless req.Plan starts) the moves of R4.
	// ENotFound for an unknown group, EUnavailable when the model's
	// provisioner does not run here.
	Rebalance(ctx context.Context, modelUUID string, req RebalanceRequest) ([]MoveInfo, error)
	// ReplaceDrifted replaces the named machines as a rolling update
	// (R5): launch before stop, within max-in-flight.
	ReplaceDrifted(ctx context.Context, modelUUID string, ids []string) error
	// Replacing returns the machines being replaced, with the reason of
	// each; none for a model another controller runs.
	Replacing(modelUUID string) map[string]string
}

// RemediationPause is a group whose remediation is paused (R3); Group ""
// is the model's machines without a group.
type RemediationPause struct {
	Group     string `json:"group"`
	Unhealthy int    `json:"unhealthy"`
	Total     int    `json:"total"`
}

// String is the line status shows.
func (p RemediationPause) String() string {
	g := "machines without a group"
	if p.Group != "" {
		g = "group " + p.Group
	}
	return fmt.Sprintf("%s: remediation paused: %d of %d unhealthy", g, p.Unhealthy, p.Total)
}

// RebalanceRequest is the body of POST /v1/models/{model}/rebalance.
type RebalanceRequest struct {
	Group string `json:"group,omitempty"` // "" = every group
	Plan  bool   `json:"plan,omitempty"`  // list the moves, change nothing
}

// MoveInfo is one machine to be replaced into another zone (R4).
type MoveInfo struct {
	Machine string `json:"machine"`
	Group   string `json:"group"`
	From    string `json:"from"`
	To      string `json:"to"`
}

// RebalanceResult is what rebalance planned and, unless Plan, started.
type RebalanceResult struct {
	Plan  bool       `json:"plan"`
	Moves []MoveInfo `json:"moves"`
}

func (s *Server) fleetRuntime() (FleetRuntime, error) {
	if fr, ok := s.cfg.Runtime.(FleetRuntime); ok {
		return fr, nil
	}
	return nil, muster.Errorf(muster.EUnavailable, "this controller does not replace machines")
}

// fleetStatus fills in the status's paused groups and replacements.
// runtimeStatus is what the status of a model holds beyond the store:
// the provisioner's error, the harvest breaker (R7), paused remediation
// and replacements in flight (R1–R5).
func (s *Server) runtimeStatus(ctx context.Context, modelUUID string) statusRuntime {
	var st statusRuntime
	if s.cfg.Runtime == nil {
		return st
	}
	st.ProvisionerError = s.cfg.Runtime.ProvisionerError(modelUUID)
	if fr, ok := s.cfg.Runtime.(FleetRuntime); ok {
		st.Remediation, st.Replacing = fr.Remediation(modelUUID), fr.Replacing(modelUUID)
	}
	if hr, ok := s.cfg.Runtime.(HarvestRuntime); ok {
		if plan, err := hr.HarvestPlan(ctx, modelUUID); err == nil {
			st.HarvestBreaker = plan.Breaker
		}
	}
	return st
}

// statusRuntime is the part of Status that runtimeStatus gives.
type statusRuntime struct {
	ProvisionerError string             `json:"provisioner-error"`
	HarvestBreaker   string             `json:"harvest-breaker"`
	Remediation      []RemediationPause `json:"remediation,omitempty"`
	Replacing        map[string]string  `json:"replacing,omitempty"`
}

func (s *Server) handleRebalance(w http.ResponseWriter, r *http.Request) error {
	var req RebalanceRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Group != "" {
		if err := muster.CheckName(req.Group); err != nil {
			return muster.Errorf(muster.EInvalid, "bad group %q: %s", req.Group, muster.ErrorMessage(err))
		}
	}
	m, err := s.model(r)
	if err != nil {
		return err
	}
	fr, err := s.fleetRuntime()
	if err != nil {
		return err
	}
	moves, err := fr.Rebalance(r.Context(), m.UUID, req)
	if err != nil {
		return err
	}
	if moves == nil {
		moves = []MoveInfo{}
	}
	writeJSON(w, http.StatusOK, RebalanceResult{Plan: req.Plan, Moves: moves})
	return nil
}

// Rebalance plans or starts R4 (POST .../rebalance).
func (c *Client) Rebalance(ctx context.Context, model string, req RebalanceRequest) (RebalanceResult, error) {
	var out RebalanceResult
	return out, c.Do(ctx, http.MethodPost, modelPath(model, "rebalance"), req, &out)
}

// String is the plan as the CLI prints it: one line per move, and what
// happens.
func (r RebalanceResult) String() string {
	var b strings.Builder
	for _, m := range r.Moves {
		fmt.Fprintf(&b, "machine %s (group %s): zone %s → %s\n", m.Machine, m.Group, m.From, m.To)
	}
	switch {
	case len(r.Moves) == 0:
		b.WriteString("balanced: nothing to move\n")
	case r.Plan:
		fmt.Fprintf(&b, "plan: %d moves; nothing changed\n", len(r.Moves))
	default:
		fmt.Fprintf(&b, "%d moves started: each new instance is started before its old one stops\n", len(r.Moves))
	}
	return b.String()
}
