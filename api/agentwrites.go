package api

import (
	"context"
	"sync"
	"time"

	"github.com/musterhq/muster"
)

// groupCommit commits the items of many requests together (group commit):
// an item that arrives while a commit runs waits for the next, which
// takes every item queued by then, one commit call per model. A request
// is still answered only once its item is committed, and an idle
// controller adds no delay: the first item goes at once. In a burst, a
// commit is followed by a short linger when few items wait, ended as
// soon as a batch's worth waits, so that the next batch is not one or two
// items (a commit's fixed cost, not its items, was most of an
// enrolment's store time). Thousands of agents
// writing at once cost the store's single writer hundreds of
// transactions, not thousands.
type groupCommit[T any] struct {
	// commit commits one model's items and returns each one's outcome.
	commit func(model string, items []T) []error
	// linger waits for a burst's next items; default lingerUntilFull.
	// Tests replace it.
	linger func()
	// lingerFor bounds the default linger; zero means the package's
	// lingerFor (tests lengthen it).
	lingerFor time.Duration

	mu      sync.Mutex
	pending map[string][]queued[T] // by model
	n       int                    // items pending
	busy    bool                   // a committer runs
	// wake is set while the committer lingers (lingerUntilFull) and
	// closed once lingerBelow items wait.
	wake chan struct{}
}

// lingerFor is how long at most a committer waits after a commit for the
// next items of a burst, when fewer than lingerBelow wait (it commits as
// soon as lingerBelow do): an item's added latency, against a transaction
// per item or two.
const (
	lingerFor   = 2 * time.Millisecond
	lingerBelow = 32
)

type queued[T any] struct {
	item T
	done chan error
}

// do queues item and returns its outcome. ctx bounds the wait, not the
// commit: once queued, an item is committed even if its request went
// away (commit can look at the item's own context to skip it).
func (g *groupCommit[T]) do(ctx context.Context, model string, item T) error {
	q := queued[T]{item: item, done: make(chan error, 1)}
	g.mu.Lock()
	if g.pending == nil {
		g.pending = map[string][]queued[T]{}
	}
	g.pending[model] = append(g.pending[model], q)
	if g.n++; g.wake != nil && g.n >= lingerBelow {
		close(g.wake)
		g.wake = nil
	}
	start := !g.busy
	g.busy = true
	g.mu.Unlock()
	if start {
		go g.run()
	}
	select {
	case err := <-q.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run commits batches until none is queued. The first batch goes at
// once; each later one after a linger when it is small.
func (g *groupCommit[T]) run() {
	for first := true; ; first = false {
		if !first && g.queued() < lingerBelow {
			if g.linger != nil {
				g.linger()
			} else {
				g.lingerUntilFull()
			}
		}
		g.mu.Lock()
		batch := g.pending
		if len(batch) == 0 {
			g.busy = false
			g.mu.Unlock()
			return
		}
		g.pending, g.n = map[string][]queued[T]{}, 0
		g.mu.Unlock()
		for model, qs := range batch {
			items := make([]T, len(qs))
			for i, q := range qs {
				items[i] = q.item
			}
			for i, err := range g.commit(model, items) {
				qs[i].done <- err
			}
		}
	}
}

// lingerUntilFull waits until lingerBelow items wait, or lingerFor.
func (g *groupCommit[T]) lingerUntilFull() {
	d := g.lingerFor
	if d == 0 {
		d = lingerFor
	}
	g.mu.Lock()
	if g.n >= lingerBelow { // filled since the committer looked
		g.mu.Unlock()
		return
	}
	wake := make(chan struct{})
	g.wake = wake
	g.mu.Unlock()
	t := time.NewTimer(d)
	select {
	case <-wake:
	case <-t.C:
	}
	t.Stop()
	g.mu.Lock()
	g.wake = nil
	g.mu.Unlock()
}

// queued returns how many items wait.
func (g *groupCommit[T]) queued() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// agentWrites group-commits what agents write: machine updates with their
// events, and enrolments.
type agentWrites struct {
	store   muster.Store
	updates groupCommit[agentWrite]
	enrols  groupCommit[*enrolWrite]
}

// agentWrite is one agent's machine update (optional) and its events.
type agentWrite struct {
	u      *muster.MachineUpdate
	events []muster.Event
}

// enrolWrite is one enrolment and, once committed, its machine.
type enrolWrite struct {
	ctx context.Context // the request's: a request gone before the commit is not enrolled
	e   muster.Enrolment
	m   muster.Machine
}

func newAgentWrites(store muster.Store) *agentWrites {
	a := &agentWrites{store: store}
	a.updates.commit = a.commitUpdates
	a.enrols.commit = a.commitEnrols
	return a
}

// write applies u (when not nil) with its events, as one part of a batch,
// and returns its own outcome.
func (a *agentWrites) write(ctx context.Context, model string, u *muster.MachineUpdate, events ...muster.Event) error {
	return a.updates.do(ctx, model, agentWrite{u: u, events: events})
}

// enrol enrols e as one part of a batch (muster.EnrolmentStore's Enrol)
// and returns its machine or its own refusal.
func (a *agentWrites) enrol(ctx context.Context, model string, e muster.Enrolment) (muster.Machine, error) {
	w := &enrolWrite{ctx: ctx, e: e}
	if err := a.enrols.do(ctx, model, w); err != nil {
		return muster.Machine{}, err
	}
	return w.m, nil
}

// commitUpdates writes one model's batch in one transaction; when that
// fails (one machine removed meanwhile fails them all), each write is
// tried on its own, so each gets its own outcome.
func (a *agentWrites) commitUpdates(model string, ws []agentWrite) []error {
	ctx := context.Background()
	apply := func(ws []agentWrite) error {
		var us []muster.MachineUpdate
		var es []muster.Event
		for _, w := range ws {
			if w.u != nil {
				us = append(us, *w.u)
			}
			es = append(es, w.events...)
		}
		return a.store.UpdateMachines(ctx, model, us, es...)
	}
	errs := make([]error, len(ws))
	err := apply(ws)
	if err == nil || len(ws) == 1 {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i := range ws {
		errs[i] = apply(ws[i : i+1])
	}
	return errs
}

// commitEnrols enrols one model's batch in one transaction, leaving out
// the enrolments whose requests went away.
func (a *agentWrites) commitEnrols(model string, ws []*enrolWrite) []error {
	errs := make([]error, len(ws))
	var live []int // of ws, in the store call's order
	var es []muster.Enrolment
	for i, w := range ws {
		if errs[i] = w.ctx.Err(); errs[i] == nil {
			live = append(live, i)
			es = append(es, w.e)
		}
	}
	if len(es) == 0 {
		return errs
	}
	out, err := a.store.Enrol(context.Background(), model, es)
	for j, i := range live {
		if err != nil {
			errs[i] = err
			continue
		}
		ws[i].m, errs[i] = out[j].Machine, out[j].Err
	}
	return errs
}
