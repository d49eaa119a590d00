package provisioner

import (
	"github.com/musterhq/muster"
)

// flags are the loop's per-machine marks that classification needs.
type flags struct {
	starting bool // a start is queued or running (P6)
	stopping bool // its instance is being stopped (P14)
	deferred bool // became dead while starting (P13)
}

// class is what P3 decides for one machine.
type class int

const (
	classNone          class = iota // nothing to do now
	classSkip                       // being stopped or flagged for a deferred stop
	classMakeDead                   // dying without an instance: make dead, then treat as dead
	classDead                       // dead: handle with the H rules
	classPending                    // alive without an instance and waiting for one: start it
	classDefer                      // dead while starting: stop once the start ends (P13)
	classMakeDeadDefer              // dying without an instance while starting: make dead and defer
)

func (c class) String() string {
	switch c {
	case classNone:
		return "none"
	case classSkip:
		return "skip"
	case classMakeDead:
		return "make-dead"
	case classDead:
		return "dead"
	case classPending:
		return "pending"
	case classDefer:
		return "defer"
	case classMakeDeadDefer:
		return "make-dead-defer"
	}
	return "unknown"
}

// classify applies P3 (with P6 and P13) to one machine. It is pure.
func classify(m muster.Machine, f flags) class {
	if f.stopping || f.deferred {
		return classSkip
	}
	switch m.Life {
	case muster.LifeDying:
		if m.HasInstance() {
			return classNone
		}
		if f.starting {
			return classMakeDeadDefer
		}
		return classMakeDead
	case muster.LifeDead:
		if f.starting {
			return classDefer
		}
		return classDead
	case muster.LifeAlive:
		if m.HasInstance() || f.starting {
			return classNone
		}
		if m.Status == muster.StatusPending || m.InstanceStatus == muster.InstanceAllocating {
			return classPending
		}
	}
	return classNone
}

// plan is the outcome of classifying a batch of machines.
type plan struct {
	MakeDead []string // make dead in the store, then handle as dead
	Dead     []string // includes MakeDead
	Pending  []string
	Defer    []string // flag for a deferred stop (includes those to make dead)
}

// classifyAll classifies machines in order. It is pure.
func classifyAll(ms []muster.Machine, flagsOf func(id string) flags) plan {
	var p plan
	for _, m := range ms {
		switch classify(m, flagsOf(m.ID)) {
		case classMakeDead:
			p.MakeDead = append(p.MakeDead, m.ID)
			p.Dead = append(p.Dead, m.ID)
		case classDead:
			p.Dead = append(p.Dead, m.ID)
		case classPending:
			p.Pending = append(p.Pending, m.ID)
		case classDefer:
			p.Defer = append(p.Defer, m.ID)
		case classMakeDeadDefer:
			p.MakeDead = append(p.MakeDead, m.ID)
			p.Defer = append(p.Defer, m.ID)
		}
	}
	return p
}
