package api

import (
	"context"
	"fmt"
	"sort"

	"github.com/musterhq/muster"
)

// Drift (SPEC R5): a machine of a fleet group has drifted when its
// template (constraints, base) is not the group's in the fleet file, or
// when the template was recorded by an earlier apply but its instance does
// not satisfy it yet (the recorded hardware falls short).

func baseOf(b string) string {
	if b == "" {
		return muster.DefaultBase
	}
	return b
}

// templateOf is the text of a template for drift lines.
func templateOf(c muster.Constraints, base string) string {
	s := c.String()
	if base != muster.DefaultBase {
		s += " base=" + base
	}
	if s == "" {
		return "no constraints"
	}
	return s
}

// satisfied reports whether recorded hardware meets the constraints it can
// be judged on (arch, cores, mem, root-disk); unknown hardware counts as
// meeting them.
func satisfied(c muster.Constraints, h muster.Hardware) bool {
	short := func(want, got uint64) bool { return want > 0 && got > 0 && got < want }
	return !(c.Arch != "" && h.Arch != "" && c.Arch != h.Arch) &&
		!short(c.Cores, h.Cores) && !short(c.Mem, h.Mem) && !short(c.RootDisk, h.RootDisk)
}

// planDrift fills in each group plan's drifted machines and its drift line,
// and returns the template updates that recording the new templates takes.
func planDrift(plans []GroupPlan, ts []muster.MachineTemplate, ms []muster.Machine, replace bool) []muster.MachineUpdate {
	var us []muster.MachineUpdate
	for i := range plans {
		p, t := &plans[i], ts[i]
		removed := map[string]bool{}
		for _, id := range p.Remove {
			removed[id] = true
		}
		want := templateOf(t.Constraints, baseOf(t.Base))
		from := map[string]bool{}
		var froms []string
		for _, m := range ms {
			if m.Group != p.Name || m.Life != muster.LifeAlive || removed[m.ID] {
				continue
			}
			have := templateOf(m.Constraints, baseOf(m.Base))
			switch {
			case have != want:
				c, b := t.Constraints, baseOf(t.Base)
				us = append(us, muster.MachineUpdate{ID: m.ID, Constraints: &c, Base: &b})
			case m.HasInstance() && !satisfied(m.Constraints, m.Instance.Hardware):
				have = "instance " + m.Instance.Hardware.String()
			default:
				continue
			}
			p.Drifted = append(p.Drifted, m.ID)
			if !from[have] {
				from[have] = true
				froms = append(froms, have)
			}
		}
		if len(p.Drifted) == 0 {
			continue
		}
		what := "running machines stay as they are; apply --replace replaces them"
		if replace {
			what = "replaced as a rolling update (launch before stop, max-in-flight)"
		}
		p.Drift = fmt.Sprintf("group %s: %d machines drifted (%s → %s): %s", p.Name, len(p.Drifted), joinSorted(froms), want, what)
	}
	return us
}

func joinSorted(ss []string) string {
	sort.Strings(ss)
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += ", "
		}
		out += s
	}
	return out
}

// applyDrift records the new templates (with an event each) and, with
// replace, starts the rolling update of every drifted machine.
func (s *Server) applyDrift(ctx context.Context, modelUUID, actor string, plans []GroupPlan, us []muster.MachineUpdate, replace bool) error {
	if len(us) > 0 {
		es := make([]muster.Event, len(us))
		for i, u := range us {
			es[i] = muster.Event{ModelUUID: modelUUID, MachineID: u.ID, Actor: actor, Kind: "template",
				Message: fmt.Sprintf("template of machine %s is now %s (apply); its instance stays until replaced", u.ID, templateOf(*u.Constraints, *u.Base))}
		}
		if err := s.store.UpdateMachines(ctx, modelUUID, us, es...); err != nil {
			return err
		}
	}
	var drifted []string
	for _, p := range plans {
		drifted = append(drifted, p.Drifted...)
	}
	if !replace || len(drifted) == 0 {
		return nil
	}
	fr, err := s.fleetRuntime()
	if err != nil {
		return err
	}
	return fr.ReplaceDrifted(ctx, modelUUID, drifted)
}

// DriftLines is every group's drift line, each ending in a newline.
func (r ApplyResult) DriftLines() string {
	out := ""
	for _, g := range r.Groups {
		if g.Drift != "" {
			out += g.Drift + "\n"
		}
	}
	return out
}
