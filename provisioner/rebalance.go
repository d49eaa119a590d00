package provisioner

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/musterhq/muster"
)

// Move is one machine replaced into another zone (R4).
type Move struct {
	MachineID string
	Group     string
	From, To  string
}

// move is a queued replacement waiting for max-in-flight (R4, R5).
type move struct {
	Move
	reason string
}

// member is what planMoves needs to know of one machine of a group.
type member struct {
	ID      string
	Zone    string
	Allowed []string // the zones constraint; empty = any
	Movable bool     // not keep-instance, not placed (--to), not busy
}

// planMoves applies R4 to one group: while the machines' counts over the
// usable zones differ by more than one, a movable machine of a fullest
// zone goes to an emptiest zone it may use. Machines outside the usable
// zones stay where they are and are not counted. It is pure; ties go to
// the zone first by name and the highest machine id, so a plan is the
// same each time it is asked for.
func planMoves(group string, ms []member, usable []string) []Move {
	count := map[string]int{}
	for _, z := range usable {
		count[z] = 0
	}
	byZone := map[string][]member{}
	for _, m := range ms {
		if _, ok := count[m.Zone]; ok {
			count[m.Zone]++
			if m.Movable {
				byZone[m.Zone] = append(byZone[m.Zone], m)
			}
		}
	}
	for _, list := range byZone {
		sort.Slice(list, func(i, j int) bool { return muster.MachineIDLess(list[j].ID, list[i].ID) })
	}
	zones := slices.Clone(usable)
	sort.Strings(zones)
	var moves []Move
	for {
		// Fullest zones first, and for each its candidates.
		sort.SliceStable(zones, func(i, j int) bool { return count[zones[i]] > count[zones[j]] })
		moved := false
		for _, from := range zones {
			for k, m := range byZone[from] {
				to := ""
				for _, z := range zones {
					if count[z] < count[from]-1 && (len(m.Allowed) == 0 || slices.Contains(m.Allowed, z)) &&
						(to == "" || count[z] < count[to]) {
						to = z
					}
				}
				if to == "" {
					continue
				}
				moves = append(moves, Move{MachineID: m.ID, Group: group, From: from, To: to})
				count[from]--
				count[to]++
				byZone[from] = slices.Delete(byZone[from], k, k+1)
				moved = true
				break
			}
			if moved {
				break
			}
		}
		if !moved {
			return moves
		}
	}
}

// Rebalance plans R4 for one group (every group when group is ""), and
// unless plan is set queues the moves: each is a launch-before-stop
// replacement into its zone, within max-in-flight. Safe for concurrent
// use (it runs on the loop).
func (p *Provisioner) Rebalance(ctx context.Context, group string, plan bool) ([]Move, error) {
	var moves []Move
	err := p.ask(ctx, func(ctx context.Context) error {
		if !p.firstDone {
			return muster.Errorf(muster.EUnavailable, "the provisioner has not made its first pass yet")
		}
		if group != "" && !p.groups[group] {
			return muster.Errorf(muster.ENotFound, "group %q not found", group)
		}
		if err := p.refreshZones(ctx); err != nil { // a zone may be back (Z2)
			return err
		}
		moves = p.planRebalance(group)
		if plan || len(moves) == 0 {
			return nil
		}
		queued := map[string]bool{}
		for _, mv := range p.moves {
			queued[mv.MachineID] = true
		}
		var evs []muster.Event
		for _, mv := range moves {
			if !queued[mv.MachineID] {
				p.moves = append(p.moves, move{Move: mv, reason: ReasonRebalance})
				evs = append(evs, p.newEvent(mv.MachineID, "rebalance", fmt.Sprintf("to move from zone %s to zone %s (group %s)", mv.From, mv.To, mv.Group)))
			}
		}
		p.appendEvents(ctx, evs...)
		return p.remediate(ctx)
	})
	return moves, err
}

// planRebalance plans the moves of one group, or of every group, from
// the loop's view of the machines and the zone table.
func (p *Provisioner) planRebalance(group string) []Move {
	var usable []string
	for _, z := range p.zones.snapshot() {
		if z.Available {
			usable = append(usable, z.Name)
		}
	}
	byGroup := map[string][]member{}
	queued := map[string]bool{}
	for _, mv := range p.moves {
		queued[mv.MachineID] = true
	}
	for id, e := range p.health {
		g := e.m.Group
		if g == "" || (group != "" && g != group) || !e.m.HasInstance() {
			continue
		}
		zone := p.zones.zoneOf(id)
		if zone == "" {
			zone = e.m.Instance.Zone
		}
		byGroup[g] = append(byGroup[g], member{ID: id, Zone: zone, Allowed: e.m.Constraints.Zones,
			Movable: e.m.Placement == "" && !e.m.KeepInstance && p.replaceable(e.m) && !queued[id]})
	}
	names := make([]string, 0, len(byGroup))
	for g := range byGroup {
		names = append(names, g)
	}
	sort.Strings(names)
	var out []Move
	for _, g := range names {
		out = append(out, planMoves(g, byGroup[g], usable)...)
	}
	return out
}

// startMoves starts queued moves within what max-in-flight leaves of each
// group's budget; moves whose machine is gone, no longer in the zone it
// was to leave, or not replaceable any more are dropped.
func (p *Provisioner) startMoves(ctx context.Context, stats map[string]*groupStat) error {
	if len(p.moves) == 0 {
		return nil
	}
	var (
		ms   []muster.Machine
		reps []*replacement
		keep []move
	)
	for _, mv := range p.moves {
		e := p.health[mv.MachineID]
		g := stats[mv.Group]
		switch {
		case e == nil || g == nil || e.m.Group != mv.Group || p.zones.zoneOf(mv.MachineID) != mv.From:
			continue // gone or moved meanwhile
		case !p.replaceable(e.m):
			if p.replacing[mv.MachineID] != nil || p.flagsOf(mv.MachineID).starting {
				keep = append(keep, mv) // busy: later
			}
			continue
		case g.budget() <= 0:
			keep = append(keep, mv)
			continue
		}
		g.inflight++
		ms = append(ms, e.m)
		why := fmt.Sprintf("from zone %s to zone %s", mv.From, mv.To)
		if mv.To == "" {
			why = "constraints " + e.m.Constraints.String()
		}
		reps = append(reps, &replacement{reason: mv.reason, zone: mv.To, launchFirst: true, why: why})
	}
	p.moves = keep
	return p.startReplacements(ctx, ms, reps)
}

// ReplaceDrifted queues launch-before-stop replacements of the named
// machines (R5: a rolling update within max-in-flight), each to a zone the
// planner chooses. Machines that cannot be replaced (not alive, without an
// instance) are refused with EInvalid and nothing is queued; a
// keep-instance machine's old instance is released, not stopped. Safe
// for concurrent use (it runs on the loop).
func (p *Provisioner) ReplaceDrifted(ctx context.Context, ids []string) error {
	return p.ask(ctx, func(ctx context.Context) error {
		queued := map[string]bool{}
		for _, mv := range p.moves {
			queued[mv.MachineID] = true
		}
		var add []move
		for _, id := range ids {
			e := p.health[id]
			if e == nil || !e.m.HasInstance() {
				return muster.Errorf(muster.EInvalid, "machine %s cannot be replaced: it is not alive with an instance", id)
			}
			if !queued[id] && p.replacing[id] == nil {
				add = append(add, move{Move: Move{MachineID: id, Group: e.m.Group, From: p.zones.zoneOf(id)}, reason: ReasonDrift})
				queued[id] = true
			}
		}
		p.moves = append(p.moves, add...)
		return p.remediate(ctx)
	})
}
