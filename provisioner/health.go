package provisioner

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/musterhq/muster"
)

// Health remediation (R1–R3). The loop keeps, for every alive machine it
// has read, what condition it is in and since when it has seen it so:
// registering (an instance running, the agent never started) or down. It
// learns that from the machines it reads anyway (every full pass and every
// change, E1), so the clock of a condition starts when the loop first saw
// it; after a restart it starts again, which can only delay a
// replacement, never hasten one.

type healthCond int

const (
	healthy     healthCond = iota
	registering            // running, agent never reported started (R1)
	agentDown              // agent stopped heartbeating (R2)
)

type healthEntry struct {
	m     muster.Machine
	cond  healthCond
	since time.Time
}

// RemediationPause is a group whose circuit breaker is open (R3): more of
// it is unhealthy than max-unhealthy allows. Group "" is the model's
// machines without a group.
type RemediationPause struct {
	Group     string
	Unhealthy int
	Total     int
}

// String is what status shows.
func (r RemediationPause) String() string {
	return fmt.Sprintf("remediation paused: %d of %d unhealthy", r.Unhealthy, r.Total)
}

// Remediation returns the groups whose remediation is paused, by group.
// Safe for concurrent use.
func (p *Provisioner) Remediation() []RemediationPause {
	if v := p.remediation.Load(); v != nil {
		return slices.Clone(*v)
	}
	return nil
}

func condOf(m muster.Machine) healthCond {
	switch {
	case !m.HasInstance() || m.InstanceStatus != muster.InstanceRunning:
		return healthy
	case m.Status == muster.StatusPending:
		return registering
	case m.Status == muster.StatusDown:
		return agentDown
	}
	return healthy
}

// observeHealth notes the condition of machines just read, and stops the
// old instance of a launch-before-stop replacement whose machine is now
// started on its new instance (R4, R5).
func (p *Provisioner) observeHealth(ms []muster.Machine) {
	now := p.clock.Now()
	for _, m := range ms {
		if m.Life != muster.LifeAlive {
			p.forgetHealth(m.ID)
			continue
		}
		c := condOf(m)
		e := p.health[m.ID]
		if e == nil || e.cond != c || e.m.InstanceID() != m.InstanceID() {
			// The breaker's counts change only with a machine going down
			// or up, or an overdue registration ending; the rest waits for
			// the timer (E1: no look at the whole model per change).
			if c == agentDown || (e != nil && (e.cond == agentDown || (e.cond == registering && p.overdue(e, now)))) {
				p.healthDirty = true
			}
			e = &healthEntry{cond: c, since: now}
			p.health[m.ID] = e
			if due, _ := deadline(e, p.groupSettings(m.Group), now); !due.IsZero() && (p.healthTimer == nil || due.Before(p.healthNext)) {
				p.armHealth(due)
			}
		}
		e.m = m
		if m.Status == muster.StatusStarted {
			delete(p.autoReplaced, m.ID)
		}
		if rep := p.replacing[m.ID]; rep != nil && rep.launchFirst && rep.newInst != "" &&
			m.InstanceID() == rep.newInst && m.Status == muster.StatusStarted {
			p.stopReplaced(m.ID, rep, "")
		}
	}
}

func (p *Provisioner) forgetHealth(id string) {
	if e := p.health[id]; e != nil && e.cond != healthy {
		p.healthDirty = true
	}
	delete(p.health, id)
	delete(p.autoReplaced, id)
	if p.replacing[id] != nil { // not alive any more: the H rules take its instances
		delete(p.replacing, id)
		p.publishReplacing()
	}
}

func (p *Provisioner) overdue(e *healthEntry, now time.Time) bool {
	_, unhealthy := deadline(e, p.groupSettings(e.m.Group), now)
	return unhealthy
}

// groupSettings returns the settings in force for a group (fleet files may
// override the health settings per group).
func (p *Provisioner) groupSettings(group string) *muster.Settings {
	s := p.settings.Load().ForGroup(group)
	return &s
}

// remediateIfDirty runs remediate when what it decides on may have
// changed since it last ran.
func (p *Provisioner) remediateIfDirty(ctx context.Context) error {
	if !p.healthDirty {
		return nil
	}
	return p.remediate(ctx)
}

// deadline is when e's machine is due for an R1 or R2 replacement (zero:
// never), and whether it counts as unhealthy now for the breaker (R3): down
// with unhealthy-after set, or registering past registration-timeout.
func deadline(e *healthEntry, s *muster.Settings, now time.Time) (due time.Time, unhealthy bool) {
	switch {
	case e.cond == registering && s.RegistrationTimeout > 0:
		due = e.since.Add(s.RegistrationTimeout)
		return due, !now.Before(due)
	case e.cond == agentDown && s.UnhealthyAfter > 0:
		return e.since.Add(s.UnhealthyAfter), true
	}
	return time.Time{}, false
}

// busyRecheck is how soon remediation looks again at a machine due for
// replacement that was busy (starting, stopping) when it came due.
const busyRecheck = 5 * time.Second

// groupStat is one group's health for R3.
type groupStat struct {
	s                          *muster.Settings // in force for the group
	total, unhealthy, inflight int
	due                        []*healthEntry
}

// breakerOpen reports whether more of the group is unhealthy than
// max-unhealthy allows (R3). One machine alone never opens it: a storm
// takes two, and a group of one or two could otherwise never be healed.
func (g *groupStat) breakerOpen() bool {
	return g.unhealthy > 1 && g.unhealthy*100 > int(g.s.MaxUnhealthy)*g.total
}

// budget is how many more replacements the group may start (R3).
func (g *groupStat) budget() int {
	return max(1, g.s.MaxInFlight.Of(g.total)) - g.inflight
}

// groupStats counts every group's machines, unhealthy machines and
// replacements in flight, lists the machines due for R1/R2 and returns
// the next deadline still to come.
func (p *Provisioner) groupStats(now time.Time) (map[string]*groupStat, time.Time) {
	stats := map[string]*groupStat{}
	var next time.Time
	for id, e := range p.health {
		g := stats[e.m.Group]
		if g == nil {
			g = &groupStat{s: p.groupSettings(e.m.Group)}
			stats[e.m.Group] = g
		}
		g.total++
		rep := p.replacing[id]
		if rep != nil {
			g.inflight++
		}
		due, unhealthy := deadline(e, g.s, now)
		if unhealthy {
			g.unhealthy++
		}
		switch {
		case due.IsZero():
		case now.Before(due):
			if next.IsZero() || due.Before(next) {
				next = due
			}
		case rep != nil:
			// A move whose new instance never registered: waiting for it
			// is over; the old one goes, and R1 deals with the new one.
			if rep.launchFirst && rep.newInst != "" && rep.newInst == e.m.InstanceID() {
				p.stopReplaced(id, rep, "the new instance never registered")
			}
		case p.replaceable(e.m):
			g.due = append(g.due, e)
		default:
			// Due while its start or stop is still in flight: nothing
			// else wakes remediation when that ends, so look again soon.
			if again := now.Add(busyRecheck); next.IsZero() || again.Before(next) {
				next = again
			}
		}
	}
	return stats, next
}

// remediate applies R1–R3: it replaces the machines due, group by group,
// unless the group's breaker is open, within max-in-flight and
// retry-count; then it starts waiting moves (R4, R5) within what
// max-in-flight leaves, and arms the timer for the next deadline.
func (p *Provisioner) remediate(ctx context.Context) error {
	p.healthDirty = false
	now := p.clock.Now()
	stats, next := p.groupStats(now)
	groups := make([]string, 0, len(stats))
	for g := range stats {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	var (
		ms     []muster.Machine
		reps   []*replacement
		evs    []muster.Event
		pauses []RemediationPause
	)
	for _, name := range groups {
		g := stats[name]
		s := g.s
		if g.breakerOpen() {
			pause := RemediationPause{Group: name, Unhealthy: g.unhealthy, Total: g.total}
			pauses = append(pauses, pause)
			if _, was := p.paused[name]; !was {
				evs = append(evs, p.newEvent("", "remediation-paused",
					fmt.Sprintf("%s: %s (max-unhealthy %d%%); nothing is replaced for health", groupName(name), pause, s.MaxUnhealthy)))
				p.log.Warn("remediation paused", "group", name, "unhealthy", g.unhealthy, "total", g.total)
			}
			p.paused[name] = pause
			continue
		}
		if _, was := p.paused[name]; was {
			delete(p.paused, name)
			evs = append(evs, p.newEvent("", "remediation-resumed",
				fmt.Sprintf("%s: %d of %d unhealthy; remediation resumed", groupName(name), g.unhealthy, g.total)))
		}
		sort.Slice(g.due, func(i, j int) bool {
			if !g.due[i].since.Equal(g.due[j].since) {
				return g.due[i].since.Before(g.due[j].since)
			}
			return muster.MachineIDLess(g.due[i].m.ID, g.due[j].m.ID)
		})
		budget := g.budget()
		for _, e := range g.due {
			if budget <= 0 {
				break
			}
			n := p.autoReplaced[e.m.ID]
			if n >= s.RetryCount {
				if n == s.RetryCount {
					p.autoReplaced[e.m.ID] = n + 1 // said once
					evs = append(evs, p.newEvent(e.m.ID, "replace-limit",
						fmt.Sprintf("not replaced again: %d replacements without the agent started (retry-count)", n)))
				}
				continue
			}
			p.autoReplaced[e.m.ID] = n + 1
			r := &replacement{reason: ReasonRegistrationTimeout,
				why: fmt.Sprintf("running %s without its agent started", now.Sub(e.since).Round(time.Second))}
			if e.cond == agentDown {
				r.reason, r.why = ReasonUnhealthy, fmt.Sprintf("agent down for %s", now.Sub(e.since).Round(time.Second))
			}
			ms, reps = append(ms, e.m), append(reps, r)
			budget--
			g.inflight++
		}
	}
	for name := range p.paused {
		if stats[name] == nil {
			delete(p.paused, name)
		}
	}
	p.publishPauses(pauses)
	p.appendEvents(ctx, evs...)
	p.armHealth(next)
	if err := p.startReplacements(ctx, ms, reps); err != nil {
		return err
	}
	return p.startMoves(ctx, stats)
}

func groupName(g string) string {
	if g == "" {
		return "machines without a group"
	}
	return "group " + g
}

func (p *Provisioner) publishPauses(pauses []RemediationPause) {
	if old := p.remediation.Load(); old != nil && slices.Equal(*old, pauses) {
		return
	}
	p.remediation.Store(&pauses)
}

// armHealth arms the loop's timer for the next R1/R2 deadline.
func (p *Provisioner) armHealth(next time.Time) {
	if p.healthTimer != nil && next.Equal(p.healthNext) {
		return
	}
	if p.healthTimer != nil {
		p.healthTimer.Stop()
		p.healthTimer = nil
	}
	p.healthNext = next
	if !next.IsZero() {
		p.healthTimer = p.clock.NewTimer(max(next.Sub(p.clock.Now()), 0))
	}
}
