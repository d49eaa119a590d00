package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/musterhq/muster"
)

// HarvestRuntime is offered by a Runtime whose provisioners harvest with
// quarantine and a breaker (R6, R7). The Server serves the harvest
// endpoints only when its Runtime offers it.
type HarvestRuntime interface {
	// HarvestPlan returns what the model's harvest holds and is about to
	// do. EUnavailable when the model's provisioner does not run here.
	HarvestPlan(ctx context.Context, modelUUID string) (HarvestPlan, error)
	// RestoreInstance starts a quarantined instance again and releases it
	// (R6, H8). ENotFound, EConflict (not quarantined), EUnavailable.
	RestoreInstance(ctx context.Context, modelUUID, id string) error
}

// HarvestPlan is the body of GET /v1/models/{model}/harvest: `muster
// harvest --plan`.
type HarvestPlan struct {
	Quarantined []PlannedHarvest `json:"quarantined"` // stopped, waiting to be terminated
	Next        []PlannedHarvest `json:"next"`        // unknown instances harvest will act on
	Breaker     string           `json:"breaker"`     // why the last pass harvested nothing (R7); "" if it did not
}

// PlannedHarvest is one instance of a HarvestPlan.
type PlannedHarvest struct {
	Instance string    `json:"instance"`
	Zone     string    `json:"zone"`
	Machine  string    `json:"machine"` // the machine tag it carries (a machine the store does not know)
	Action   string    `json:"action"`  // "terminate" or "quarantine"
	Since    time.Time `json:"since,omitzero"`
	At       time.Time `json:"at,omitzero"` // when it is due; absent: not while harvest-mode excludes unknown instances, or released
	Held     bool      `json:"held"`        // held back by the breaker
	Released bool      `json:"released"`    // restored: never harvested again
}

// RestoreRequest is the body of POST /v1/models/{model}/harvest/restore.
type RestoreRequest struct {
	Instance string `json:"instance"`
}

// Explanation is the body of GET /v1/models/{model}/machines/{id}/explain:
// `muster explain ID` (R8), built from the machine's recorded decision
// events, so it outlives a controller restart.
type Explanation struct {
	Machine         string                   `json:"machine"`
	Life            string                   `json:"life"`
	Status          string                   `json:"status"`
	InstanceID      string                   `json:"instance-id"`
	InstanceStatus  string                   `json:"instance-status"`
	InstanceMessage string                   `json:"instance-message"`
	Attempts        []muster.AttemptDecision `json:"attempts"`
	// Replacements are the machine's replacement events (R1–R5), oldest
	// first: why an instance was replaced, or why not again.
	Replacements []ExplainNote `json:"replacements"`
	// Replacing is the reason of a replacement in flight; Paused says why
	// its group is not remediated now (R3); "" when neither holds.
	Replacing string `json:"replacing"`
	Paused    string `json:"remediation-paused"`
}

// ExplainNote is one event of an explanation.
type ExplainNote struct {
	Time    time.Time `json:"time"`
	Kind    string    `json:"kind"`
	Message string    `json:"message"`
}

// replacementKinds are the kinds of the events fleet health records for a
// machine.
var replacementKinds = map[string]bool{"replace": true, "replaced": true, "replace-limit": true}

// ExplainEventLimit bounds the machine's newest events an explanation reads.
const ExplainEventLimit = 1000

func (s *Server) harvestRoutes(m *http.ServeMux) {
	m.Handle("GET /v1/models/{model}/harvest", s.adminOnly(s.handleHarvestPlan))
	m.Handle("POST /v1/models/{model}/harvest/restore", s.adminOnly(s.handleRestore))
	m.Handle("GET /v1/models/{model}/machines/{id}/explain", s.adminOrDashboard(s.handleExplain))
}

func (s *Server) harvestRuntime() (HarvestRuntime, error) {
	if hr, ok := s.cfg.Runtime.(HarvestRuntime); ok {
		return hr, nil
	}
	return nil, muster.Errorf(muster.EUnavailable, "this controller does not run harvests")
}

func (s *Server) handleHarvestPlan(w http.ResponseWriter, r *http.Request) error {
	m, err := s.model(r)
	if err != nil {
		return err
	}
	hr, err := s.harvestRuntime()
	if err != nil {
		return err
	}
	plan, err := hr.HarvestPlan(r.Context(), m.UUID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, plan.lists())
	return nil
}

// lists makes nil lists empty, so scripts can rely on every key.
func (p HarvestPlan) lists() HarvestPlan {
	p.Quarantined, p.Next = orEmpty(p.Quarantined), orEmpty(p.Next)
	return p
}

func (s *Server) handleRestore(w http.ResponseWriter, r *http.Request) error {
	m, err := s.model(r)
	if err != nil {
		return err
	}
	var req RestoreRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	if req.Instance == "" || strings.ContainsFunc(req.Instance, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		return muster.Errorf(muster.EInvalid, "bad instance id %q", req.Instance)
	}
	hr, err := s.harvestRuntime()
	if err != nil {
		return err
	}
	if err := hr.RestoreInstance(r.Context(), m.UUID, req.Instance); err != nil {
		return err
	}
	s.appendEvents(r.Context(), []muster.Event{{ModelUUID: m.UUID, Actor: "admin", Kind: "restore",
		Message: "quarantined instance " + req.Instance + " restored"}})
	writeJSON(w, http.StatusOK, struct{}{})
	return nil
}

func (s *Server) handleExplain(w http.ResponseWriter, r *http.Request) error {
	m, mc, es, err := s.machineEvents(r, ExplainEventLimit)
	if err != nil {
		return err
	}
	e := ExplainEvents(mc, es)
	rt := s.runtimeStatus(r.Context(), m.UUID)
	e.Replacing = rt.Replacing[mc.ID]
	for _, p := range rt.Remediation {
		if p.Group == mc.Group {
			e.Paused = p.String()
		}
	}
	writeJSON(w, http.StatusOK, e)
	return nil
}

// ExplainEvents builds a machine's explanation from its events: every decision
// event, oldest first. An event that does not decode is skipped (and
// says so), never fatal.
func ExplainEvents(mc muster.Machine, es []muster.Event) Explanation {
	e := Explanation{Machine: mc.ID, Life: string(mc.Life), Status: string(mc.Status), InstanceID: mc.InstanceID(),
		InstanceStatus: string(mc.InstanceStatus), InstanceMessage: mc.InstanceMessage, Attempts: []muster.AttemptDecision{},
		Replacements: []ExplainNote{}}
	for _, ev := range es {
		if replacementKinds[ev.Kind] {
			e.Replacements = append(e.Replacements, ExplainNote{Time: ev.Time, Kind: ev.Kind, Message: ev.Message})
		}
		if ev.Kind != muster.EventDecision {
			continue
		}
		var d muster.AttemptDecision
		if err := json.Unmarshal([]byte(ev.Message), &d); err != nil {
			d = muster.AttemptDecision{Time: ev.Time, Error: "undecodable decision event: " + err.Error()}
		}
		d.Candidates, d.Blocked = orEmpty(d.Candidates), orEmpty(d.Blocked)
		d.Failed, d.Excluded = orEmpty(d.Failed), orEmpty(d.Excluded)
		e.Attempts = append(e.Attempts, d)
	}
	return e
}

// Write writes e in format: "json" (indented), else text.
func (e Explanation) Write(w io.Writer, format string) error {
	if format == "json" {
		b, err := json.MarshalIndent(e, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	return e.WriteText(w)
}

// WriteText writes e as `muster explain` prints it, with text from the
// cloud escaped (S8).
func (e Explanation) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "machine %s: %s, %s", e.Machine, e.Status, e.InstanceStatus)
	if e.InstanceID != "" {
		fmt.Fprintf(&b, ", instance %s", e.InstanceID)
	}
	if e.InstanceMessage != "" {
		fmt.Fprintf(&b, " (%s)", muster.Printable(e.InstanceMessage))
	}
	b.WriteString("\n")
	if len(e.Attempts) == 0 {
		b.WriteString("no start attempt recorded\n")
	}
	for _, a := range e.Attempts {
		fmt.Fprintf(&b, "attempt %d at %s, shape %s\n", a.Attempt, a.Time.UTC().Format(time.RFC3339), a.Shape)
		var cands []string
		for _, c := range a.Candidates {
			cands = append(cands, fmt.Sprintf("%s (machines: %d)", c.Zone, c.Machines))
		}
		var blocked []string
		for _, z := range a.Blocked {
			blocked = append(blocked, z.Zone+" until "+z.Until.UTC().Format(time.RFC3339))
		}
		fmt.Fprintf(&b, "  candidates: %s\n", orNone(cands))
		fmt.Fprintf(&b, "  failed before: %s; excluded: %s; out of capacity (remembered): %s\n",
			orNone(a.Failed), orNone(a.Excluded), orNone(blocked))
		fmt.Fprintf(&b, "  rate limiter wait: %.3fs\n", a.LimiterWait)
		switch {
		case a.Zone != "":
			fmt.Fprintf(&b, "  chose zone %s\n", a.Zone)
		case len(a.Candidates) == 0 && a.Error != "":
			b.WriteString("  chose no zone\n")
		}
		if a.Instance != "" {
			fmt.Fprintf(&b, "  started instance %s\n", a.Instance)
		}
		if a.Error != "" {
			fmt.Fprintf(&b, "  error (%s): %s\n", a.ErrorKind, muster.Printable(a.Error))
		}
		if a.Next != "" {
			fmt.Fprintf(&b, "  next: %s", muster.Printable(a.Next))
			if !a.NextRetry.IsZero() {
				fmt.Fprintf(&b, " (at %s)", a.NextRetry.UTC().Format(time.RFC3339))
			}
			b.WriteString("\n")
		}
	}
	for _, n := range e.Replacements {
		fmt.Fprintf(&b, "%s at %s: %s\n", n.Kind, n.Time.UTC().Format(time.RFC3339), n.Message)
	}
	if e.Replacing != "" {
		fmt.Fprintf(&b, "being replaced: %s\n", e.Replacing)
	}
	if e.Paused != "" {
		fmt.Fprintf(&b, "not replaced for health now: %s\n", e.Paused)
	}
	return writeLines(w, b.String())
}

// writeLines writes text line by line with control characters escaped
// (S8): zone names, errors and instance ids come from clouds and agents.
func writeLines(w io.Writer, text string) error {
	var b strings.Builder
	for _, l := range strings.SplitAfter(text, "\n") {
		line, nl := strings.CutSuffix(l, "\n")
		b.WriteString(muster.Printable(line))
		if nl {
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// orEmpty makes a nil list empty: every list is [] in JSON, never null.
func orEmpty[T any](l []T) []T {
	if l == nil {
		return []T{}
	}
	return l
}

func orNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// HarvestPlan returns a model's harvest plan (GET .../harvest).
func (c *Client) HarvestPlan(ctx context.Context, model string) (HarvestPlan, error) {
	var out HarvestPlan
	return out, c.Do(ctx, http.MethodGet, modelPath(model, "harvest"), nil, &out)
}

// RestoreInstance restores a quarantined instance (POST .../harvest/restore).
func (c *Client) RestoreInstance(ctx context.Context, model, id string) error {
	return c.Do(ctx, http.MethodPost, modelPath(model, "harvest", "restore"), RestoreRequest{Instance: id}, nil)
}

// Explain returns a machine's explanation (GET .../machines/ID/explain).
func (c *Client) Explain(ctx context.Context, model, id string) (Explanation, error) {
	var out Explanation
	return out, c.Do(ctx, http.MethodGet, modelPath(model, "machines", url.PathEscape(id), "explain"), nil, &out)
}

// WriteText writes p as `muster harvest --plan` prints it.
func (p HarvestPlan) WriteText(w io.Writer) error {
	var b strings.Builder
	if p.Breaker != "" {
		fmt.Fprintf(&b, "BREAKER: %s\n", p.Breaker)
	}
	row := func(h PlannedHarvest, what string) {
		fmt.Fprintf(&b, "%-24s %-6s %-8s %s\n", h.Instance, h.Zone, h.Machine, what)
	}
	if len(p.Quarantined) == 0 && len(p.Next) == 0 {
		b.WriteString("nothing quarantined, nothing to harvest\n")
	} else {
		fmt.Fprintf(&b, "%-24s %-6s %-8s %s\n", "INSTANCE", "ZONE", "MACHINE", "HARVEST")
	}
	for _, h := range p.Quarantined {
		what := "quarantined since " + h.Since.UTC().Format(time.RFC3339) + ", "
		switch {
		case h.Released:
			what += "restored"
		case h.At.IsZero():
			what += "kept (harvest-mode excludes unknown instances)"
		default:
			what += "terminated at " + h.At.UTC().Format(time.RFC3339)
		}
		row(h, what)
	}
	for _, h := range p.Next {
		what := h.Action
		switch {
		case h.Held:
			what += ": held by the breaker"
		case !h.At.IsZero():
			what += " at " + h.At.UTC().Format(time.RFC3339)
		}
		row(h, what)
	}
	return writeLines(w, b.String())
}

// BlockedText is the zone's capacity blocks (Z7) in one cell of `muster
// zones`: "shape until time; …", or "-".
func (z ZoneInfo) BlockedText() string {
	var l []string
	for _, b := range z.Blocked {
		l = append(l, muster.Printable(b.Shape)+" until "+b.Until.UTC().Format(time.RFC3339))
	}
	if len(l) == 0 {
		return "-"
	}
	return strings.Join(l, "; ")
}
