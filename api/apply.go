package api

import (
	"fmt"
	"net/http"
	"sort"

	"github.com/musterhq/muster"
)

// planApply computes the plan of a fleet against the model's machines: per
// group, machines to add, and surplus alive machines to remove, highest ids
// first. It also returns one template per group (nil for groups with
// nothing to add).
func planApply(req ApplyRequest, ms []muster.Machine) ([]GroupPlan, []muster.MachineTemplate, error) {
	if len(req.Groups) == 0 {
		return nil, nil, muster.Errorf(muster.EInvalid, "no groups given")
	}
	alive := map[string][]string{}
	for _, m := range ms {
		if m.Life == muster.LifeAlive && m.Group != "" {
			alive[m.Group] = append(alive[m.Group], m.ID)
		}
	}
	total := 0
	for _, g := range req.Groups {
		if g.Count > 0 {
			total += min(g.Count, MaxAddMachines+1)
		}
	}
	if total > MaxAddMachines {
		// Per request, not per group: ten groups of the maximum would
		// declare ten times it (S7).
		return nil, nil, muster.Errorf(muster.EInvalid, "too many machines in one apply: the groups ask for %d, at most %d", total, MaxAddMachines)
	}
	seen := map[string]bool{}
	plans := make([]GroupPlan, len(req.Groups))
	ts := make([]muster.MachineTemplate, len(req.Groups))
	for i, g := range req.Groups {
		if err := muster.CheckName(g.Name); err != nil {
			return nil, nil, muster.Errorf(muster.EInvalid, "bad group name %q: %s", g.Name, muster.ErrorMessage(err))
		}
		if seen[g.Name] {
			return nil, nil, muster.Errorf(muster.EInvalid, "group %q given more than once", g.Name)
		}
		seen[g.Name] = true
		if g.Count < 0 || g.Count > MaxAddMachines {
			return nil, nil, muster.Errorf(muster.EInvalid, "bad count %d for group %q: want 0 to %d", g.Count, g.Name, MaxAddMachines)
		}
		t, err := muster.NewMachineTemplate(g.Constraints, g.Name, g.Base, "", g.Storage)
		if err != nil {
			return nil, nil, &muster.Error{Code: muster.EInvalid, Message: fmt.Sprintf("group %q: %s", g.Name, muster.ErrorMessage(err)), Err: err}
		}
		ts[i] = t
		ids := alive[g.Name]
		sort.Slice(ids, func(a, b int) bool { return muster.MachineIDLess(ids[b], ids[a]) })
		p := GroupPlan{Name: g.Name, Have: len(ids), Want: g.Count, Added: []string{}, Remove: []string{}}
		if g.Count > len(ids) {
			p.Add = g.Count - len(ids)
		} else {
			p.Remove = append(p.Remove, ids[:len(ids)-g.Count]...)
		}
		plans[i] = p
	}
	return plans, ts, nil
}

func (s *Server) handleApply(w http.ResponseWriter, r *http.Request) error {
	var req ApplyRequest
	if err := decode(r, &req); err != nil {
		return err
	}
	m, err := s.model(r)
	if err != nil {
		return err
	}
	ctx := r.Context()
	ms, err := s.store.Machines(ctx, m.UUID, nil)
	if err != nil {
		return err
	}
	plans, ts, err := planApply(req, ms)
	if err != nil {
		return err
	}
	if err := s.applyGroupSettings(ctx, m, req.Groups, req.DryRun); err != nil {
		return err
	}
	templates := planDrift(plans, ts, ms, req.Replace)
	for i, t := range ts {
		if err := s.checkOffered(m, t); err != nil && plans[i].Add > 0 {
			return muster.Errorf(muster.EInvalid, "group %q: %s", t.Group, muster.ErrorMessage(err))
		}
	}
	res := ApplyResult{DryRun: req.DryRun, Groups: plans}
	if req.DryRun {
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	actor := principalOf(ctx).actor()
	if err := s.applyDrift(ctx, m.UUID, actor, plans, templates, req.Replace); err != nil {
		return err
	}
	var us []muster.MachineUpdate
	var adds []muster.MachineTemplate
	var es []muster.Event
	for i, p := range plans {
		for _, id := range p.Remove {
			us = append(us, muster.MachineUpdate{ID: id, Life: muster.Ptr(muster.LifeDying)})
			es = append(es, muster.Event{ModelUUID: m.UUID, MachineID: id, Actor: actor, Kind: "remove-machine",
				Message: fmt.Sprintf("machine %s marked dying by apply (group %s wants %d)", id, p.Name, p.Want)})
		}
		for n := 0; n < p.Add; n++ {
			t := ts[i]
			t.Storage = append([]muster.StorageDirective(nil), t.Storage...)
			adds = append(adds, t)
		}
	}
	// Removals and additions each go in one transaction; everything was
	// validated above, so the additions cannot be refused for bad input.
	if len(us) > 0 {
		if err := s.store.UpdateMachines(ctx, m.UUID, us); err != nil {
			return err
		}
		s.hb.setLives(m.UUID, us)
	}
	if len(adds) > 0 {
		added, err := s.store.AddMachines(ctx, m.UUID, adds)
		if err != nil {
			s.appendEvents(ctx, es)
			return err
		}
		k := 0
		for i := range plans {
			for n := 0; n < plans[i].Add && k < len(added); n++ {
				mc := added[k]
				k++
				res.Groups[i].Added = append(res.Groups[i].Added, mc.ID)
				es = append(es, muster.Event{ModelUUID: m.UUID, MachineID: mc.ID, Actor: actor, Kind: "add-machine",
					Message: describeMachine(mc) + " by apply"})
			}
		}
	}
	s.appendEvents(ctx, es)
	writeJSON(w, http.StatusOK, res)
	return nil
}
