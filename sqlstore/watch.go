package sqlstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/musterhq/muster"
)

// Watch starts a watcher on one model's change log. With from == 0 the
// first ChangeSet holds the model's current state as seen by the watched
// kinds: every machine id (kind machine), Model true (kind model) and
// Events true (kind event).
func (s *Store) Watch(ctx context.Context, modelUUID string, from int64, kinds ...muster.ChangeKind) (muster.Watcher, error) {
	if from < 0 {
		return nil, muster.Errorf(muster.EInvalid, "bad revision %d: want zero or more", from)
	}
	want := map[muster.ChangeKind]bool{}
	for _, k := range kinds {
		switch k {
		case muster.ChangeMachine, muster.ChangeModel, muster.ChangeEvent:
			want[k] = true
		default:
			return nil, muster.Errorf(muster.EInvalid, "bad change kind %q: want machine, model or event", k)
		}
	}
	if len(want) == 0 {
		want = map[muster.ChangeKind]bool{muster.ChangeMachine: true, muster.ChangeModel: true, muster.ChangeEvent: true}
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := s.checkModel(ctx, modelUUID); err != nil {
		return nil, err
	}
	w := &watcher{
		s:     s,
		model: modelUUID,
		kinds: want,
		last:  from,
		ch:    make(chan muster.ChangeSet),
		done:  make(chan struct{}),
		pend:  pending{ids: map[int64]bool{}},
	}
	if from == 0 {
		if err := w.initial(ctx); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, errClosed
	}
	s.wg.Add(1)
	s.mu.Unlock()
	var wctx context.Context
	wctx, w.cancel = context.WithCancel(ctx)
	go w.run(wctx)
	return w, nil
}

type watcher struct {
	s      *Store
	model  string
	kinds  map[muster.ChangeKind]bool
	last   int64 // newest revision read
	ch     chan muster.ChangeSet
	cancel context.CancelFunc
	done   chan struct{}
	pend   pending // only run touches it after Watch returns

	mu      sync.Mutex
	err     error
	closing bool
}

// pending is the coalesced ChangeSet not yet delivered.
type pending struct {
	rev    int64
	ids    map[int64]bool
	model  bool
	events bool
	force  bool // deliver even when empty: the initial set
	resync bool // the set is a full resync after a trimmed gap
}

func (p *pending) empty() bool { return !p.force && len(p.ids) == 0 && !p.model && !p.events }

func (p *pending) take() muster.ChangeSet {
	cs := muster.ChangeSet{Revision: p.rev, Model: p.model, Events: p.events, Resync: p.resync}
	if len(p.ids) > 0 {
		nums := make([]int64, 0, len(p.ids))
		for id := range p.ids {
			nums = append(nums, id)
		}
		sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
		cs.Machines = make([]string, len(nums))
		for i, n := range nums {
			cs.Machines[i] = formatID(n)
		}
		p.ids = map[int64]bool{}
	}
	p.model, p.events, p.force, p.resync = false, false, false, false
	return cs
}

// initial reads the revision and the model's machines in one snapshot.
func (w *watcher) initial(ctx context.Context) error {
	s := w.s
	tx, err := s.rdb.BeginTx(ctx, s.d.snapshot)
	if err != nil {
		return fmt.Errorf("watch model %s: %w", w.model, err)
	}
	defer tx.Rollback()
	if err := tx.QueryRowContext(ctx, `SELECT revision FROM revision_counter WHERE one = 1`).Scan(&w.last); err != nil {
		return fmt.Errorf("watch model %s: read revision: %w", w.model, err)
	}
	w.pend.rev = w.last
	w.pend.force = true
	w.pend.model = w.kinds[muster.ChangeModel]
	w.pend.events = w.kinds[muster.ChangeEvent]
	if !w.kinds[muster.ChangeMachine] {
		return nil
	}
	rows, err := tx.QueryContext(ctx, s.d.rebind(`SELECT id FROM machines WHERE model_uuid = ?`), w.model)
	if err != nil {
		return fmt.Errorf("watch model %s: read machines: %w", w.model, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return fmt.Errorf("watch model %s: read machines: %w", w.model, err)
		}
		w.pend.ids[id] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("watch model %s: read machines: %w", w.model, err)
	}
	return nil
}

func (w *watcher) run(ctx context.Context) {
	defer w.s.wg.Done()
	defer close(w.done)
	defer close(w.ch)
	ticker := time.NewTicker(w.s.poll)
	defer ticker.Stop()
	var lastRead time.Time
	for {
		// Take the notification channel before reading, so that a commit
		// after the read always wakes us.
		notify := w.s.notifier(w.model)
		if err := w.spaceReads(ctx, lastRead); err != nil {
			w.stop(ctx, err)
			return
		}
		lastRead = time.Now()
		if err := w.read(ctx); err != nil {
			w.stop(ctx, err)
			return
		}
	wait:
		for {
			var out chan muster.ChangeSet
			var cs muster.ChangeSet
			if !w.pend.empty() {
				out = w.ch
				cs = w.pend.take()
			}
			select {
			case out <- cs:
				continue
			case <-notify:
			case <-ticker.C:
			case <-ctx.Done():
				w.stop(ctx, nil)
				return
			case <-w.s.done:
				w.stop(ctx, errClosed)
				return
			}
			if out != nil {
				w.restore(cs) // not delivered; keep it for the next try
			}
			break wait
		}
	}
}

// spaceReads waits until the store's watch gap (WithWatchGap) has passed
// since the last read; nil means read, else why the watcher stops.
func (w *watcher) spaceReads(ctx context.Context, last time.Time) error {
	wait := w.s.gap - time.Since(last)
	if last.IsZero() || wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-w.s.done:
		return errClosed
	}
}

// restore puts an undelivered ChangeSet back into pending.
func (w *watcher) restore(cs muster.ChangeSet) {
	if cs.Revision > w.pend.rev {
		w.pend.rev = cs.Revision
	}
	for _, id := range cs.Machines {
		n, _ := strconv.ParseInt(id, 10, 64)
		w.pend.ids[n] = true
	}
	w.pend.force = true // it may be the initial set, which is due even when empty
	w.pend.model = w.pend.model || cs.Model
	w.pend.events = w.pend.events || cs.Events
	w.pend.resync = w.pend.resync || cs.Resync
}

// read adds the changes after w.last to the pending set. When the model's
// change log was trimmed past the watcher's position, the changes in the
// gap are gone, so it resyncs in full instead (S10). The floor is read
// after the changes: a trim between the two reads shows in the floor.
func (w *watcher) read(ctx context.Context) error {
	from := w.last
	if err := w.readChanges(ctx); err != nil {
		return err
	}
	floor, err := w.s.changeFloor(ctx, w.model)
	if err != nil {
		return fmt.Errorf("watch model %s: read change floor: %w", w.model, err)
	}
	if floor <= from {
		return nil
	}
	// What was pending is superseded: a removed machine must not be
	// reported as if it still existed.
	w.pend = pending{ids: map[int64]bool{}}
	if err := w.initial(ctx); err != nil {
		return err
	}
	w.pend.resync = true
	return nil
}

func (w *watcher) readChanges(ctx context.Context) error {
	s := w.s
	rows, err := s.query(ctx, (`SELECT revision, kind, key FROM changes WHERE model_uuid = ? AND revision > ? ORDER BY revision`), w.model, w.last)
	if err != nil {
		return fmt.Errorf("watch model %s: read changes: %w", w.model, err)
	}
	defer rows.Close()
	for rows.Next() {
		var rev int64
		var kind, key string
		if err := rows.Scan(&rev, &kind, &key); err != nil {
			return fmt.Errorf("watch model %s: read changes: %w", w.model, err)
		}
		w.last = rev
		k := muster.ChangeKind(kind)
		if !w.kinds[k] {
			continue
		}
		w.pend.rev = rev
		switch k {
		case muster.ChangeMachine:
			if n, ok := parseID(key); ok {
				w.pend.ids[n] = true
			}
		case muster.ChangeModel:
			w.pend.model = true
		case muster.ChangeEvent:
			w.pend.events = true
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("watch model %s: read changes: %w", w.model, err)
	}
	return nil
}

// stop records why the watcher ends: err, or the context's error unless
// Close ended it.
func (w *watcher) stop(ctx context.Context, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closing {
		return
	}
	if err == nil || ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	w.err = err
}

func (w *watcher) Changes() <-chan muster.ChangeSet { return w.ch }

func (w *watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close stops the watcher and waits for it; it is safe to call more than
// once.
func (w *watcher) Close() error {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	w.cancel()
	<-w.done
	return nil
}
