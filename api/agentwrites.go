package api

import (
	"context"
	"sync"

	"github.com/musterhq/muster"
)

// agentWrites commits the writes of many agents together (group commit):
// a write that arrives while the store is busy with one transaction waits
// for the next, which takes every write queued by then, one transaction
// per model. An agent's write is still answered only once it is in the
// store, and an idle controller adds no delay: the first write goes at
// once. Thousands of agents reporting started cost the store's single
// writer tens of transactions, not thousands.
type agentWrites struct {
	store muster.Store

	mu      sync.Mutex
	pending map[string][]*agentWrite // by model
	busy    bool                     // a committer runs
}

// agentWrite is one agent's machine update (optional) and its events.
type agentWrite struct {
	u      *muster.MachineUpdate
	events []muster.Event
	done   chan error
}

func newAgentWrites(store muster.Store) *agentWrites {
	return &agentWrites{store: store, pending: map[string][]*agentWrite{}}
}

// write applies u (when not nil) with its events, as one part of a batch,
// and returns its own outcome. ctx bounds the wait, not the write: once
// queued, a write is committed even if its request went away.
func (a *agentWrites) write(ctx context.Context, model string, u *muster.MachineUpdate, events ...muster.Event) error {
	w := &agentWrite{u: u, events: events, done: make(chan error, 1)}
	a.mu.Lock()
	a.pending[model] = append(a.pending[model], w)
	start := !a.busy
	a.busy = true
	a.mu.Unlock()
	if start {
		go a.commit()
	}
	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// commit writes batches until none is queued.
func (a *agentWrites) commit() {
	for {
		a.mu.Lock()
		batch := a.pending
		if len(batch) == 0 {
			a.busy = false
			a.mu.Unlock()
			return
		}
		a.pending = map[string][]*agentWrite{}
		a.mu.Unlock()
		for model, ws := range batch {
			a.commitModel(model, ws)
		}
	}
}

// commitModel writes one model's batch in one transaction; when that
// fails (one machine removed meanwhile fails them all), each write is
// tried on its own, so each gets its own outcome.
func (a *agentWrites) commitModel(model string, ws []*agentWrite) {
	ctx := context.Background()
	apply := func(ws []*agentWrite) error {
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
	err := apply(ws)
	if err == nil || len(ws) == 1 {
		for _, w := range ws {
			w.done <- err
		}
		return
	}
	for _, w := range ws {
		w.done <- apply([]*agentWrite{w})
	}
}
