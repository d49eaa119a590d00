package provisioner

import (
	"context"
	"sync"

	"github.com/musterhq/muster"
)

// maxWriteBatch bounds the records or events one transaction carries.
const maxWriteBatch = 500

// writer coalesces the instance records and events of concurrent workers
// into batched transactions (E4): while one write runs, the writes that
// arrive queue up and then go together in the next. A write waits for its
// outcome, so callers keep their order and see their errors.
type writer struct {
	store Store
	model string
	recs  chan *recordReq
	evs   chan *eventReq
	wg    sync.WaitGroup
}

type recordReq struct {
	recs []muster.InstanceRecord
	errs []error
	err  error
	done chan struct{}
}

type eventReq struct {
	evs  []muster.Event
	err  error
	done chan struct{}
}

func newWriter(ctx context.Context, store Store, model string) *writer {
	w := &writer{store: store, model: model, recs: make(chan *recordReq), evs: make(chan *eventReq)}
	w.wg.Add(2)
	go w.runRecords(ctx)
	go w.runEvents(ctx)
	return w
}

// wait waits for the writer's goroutines, which end with ctx.
func (w *writer) wait() { w.wg.Wait() }

// record is Store.RecordInstances, batched with concurrent calls.
func (w *writer) record(ctx context.Context, recs []muster.InstanceRecord) ([]error, error) {
	r := &recordReq{recs: recs, done: make(chan struct{})}
	select {
	case w.recs <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case <-r.done:
		return r.errs, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// events is Store.AppendEvents, batched with concurrent calls.
func (w *writer) events(ctx context.Context, evs []muster.Event) error {
	r := &eventReq{evs: evs, done: make(chan struct{})}
	select {
	case w.evs <- r:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *writer) runRecords(ctx context.Context) {
	defer w.wg.Done()
	for {
		var batch []*recordReq
		n := 0
		select {
		case <-ctx.Done():
			return
		case r := <-w.recs:
			batch, n = append(batch, r), len(r.recs)
		}
	more:
		for n < maxWriteBatch {
			select {
			case r := <-w.recs:
				batch, n = append(batch, r), n+len(r.recs)
			default:
				break more
			}
		}
		all := make([]muster.InstanceRecord, 0, n)
		for _, r := range batch {
			all = append(all, r.recs...)
		}
		errs, err := w.store.RecordInstances(ctx, w.model, all)
		off := 0
		for _, r := range batch {
			r.err = err
			if err == nil && len(errs) == len(all) {
				r.errs = errs[off : off+len(r.recs)]
			}
			off += len(r.recs)
			close(r.done)
		}
	}
}

func (w *writer) runEvents(ctx context.Context) {
	defer w.wg.Done()
	for {
		var batch []*eventReq
		n := 0
		select {
		case <-ctx.Done():
			return
		case r := <-w.evs:
			batch, n = append(batch, r), len(r.evs)
		}
	more:
		for n < maxWriteBatch {
			select {
			case r := <-w.evs:
				batch, n = append(batch, r), n+len(r.evs)
			default:
				break more
			}
		}
		all := make([]muster.Event, 0, n)
		for _, r := range batch {
			all = append(all, r.evs...)
		}
		err := w.store.AppendEvents(ctx, all)
		for _, r := range batch {
			r.err = err
			close(r.done)
		}
	}
}
