package storetest

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
)

// recorder reads a watcher and checks every ChangeSet it delivers:
// revisions strictly increase, machine ids are sorted numerically and
// never repeated within a set.
type recorder struct {
	tb       testing.TB
	w        muster.Watcher
	sets     []muster.ChangeSet
	machines map[string]int64 // id → newest revision of a set holding it
	model    bool
	events   bool
}

func watch(tb testing.TB, s muster.Store, model string, from int64, kinds ...muster.ChangeKind) *recorder {
	tb.Helper()
	w, err := s.Watch(ctxFor(tb), model, from, kinds...)
	if err != nil {
		tb.Fatalf("watch: %v", err)
	}
	tb.Cleanup(func() { w.Close() })
	return &recorder{tb: tb, w: w, machines: map[string]int64{}}
}

func (r *recorder) last() int64 {
	if len(r.sets) == 0 {
		return 0
	}
	return r.sets[len(r.sets)-1].Revision
}

func (r *recorder) add(cs muster.ChangeSet) {
	r.tb.Helper()
	if len(r.sets) > 0 && cs.Revision <= r.last() {
		r.tb.Fatalf("change set revision %d after %d: want increasing", cs.Revision, r.last())
	}
	prev := int64(-1)
	for _, id := range cs.Machines {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != id {
			r.tb.Fatalf("change set holds bad machine id %q", id)
		}
		if n <= prev {
			r.tb.Fatalf("change set machines %v: want sorted numerically without repeats", cs.Machines)
		}
		prev = n
		r.machines[id] = cs.Revision
	}
	r.model = r.model || cs.Model
	r.events = r.events || cs.Events
	r.sets = append(r.sets, cs)
}

// next waits for the next ChangeSet.
func (r *recorder) next() muster.ChangeSet {
	r.tb.Helper()
	select {
	case cs, ok := <-r.w.Changes():
		if !ok {
			r.tb.Fatalf("watcher ended early: %v", r.w.Err())
		}
		r.add(cs)
		return cs
	case <-time.After(waitFor):
		r.tb.Fatalf("no change set within %s (last revision %d)", waitFor, r.last())
	}
	return muster.ChangeSet{}
}

// until reads until a set with revision rev or later arrived.
func (r *recorder) until(rev int64) {
	r.tb.Helper()
	for r.last() < rev {
		r.next()
	}
}

// seen returns the machine ids delivered so far, sorted numerically.
func (r *recorder) seen() []string {
	out := []string{}
	for id := range r.machines {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := strconv.Atoi(out[i])
		b, _ := strconv.Atoi(out[j])
		return a < b
	})
	return out
}

// reset forgets what was delivered so far.
func (r *recorder) reset() {
	r.machines = map[string]int64{}
	r.model, r.events = false, false
}

func revision(tb testing.TB, s muster.Store) int64 {
	tb.Helper()
	rev, err := s.Revision(context.Background())
	if err != nil {
		tb.Fatalf("revision: %v", err)
	}
	return rev
}

func testWatchInitial(t *testing.T, h *harness) {
	s := h.store(t)
	empty := newModel(t, s, "empty")
	m := newModel(t, s, "m")
	addMachines(t, s, m.UUID, 12)
	rev := revision(t, s)
	r := watch(t, s, m.UUID, 0)
	cs := r.next()
	want := muster.ChangeSet{Revision: rev, Machines: ids(12), Model: true, Events: cs.Events}
	if !reflect.DeepEqual(cs, want) {
		t.Fatalf("initial set: got %+v, want %+v", cs, want)
	}
	r = watch(t, s, empty.UUID, 0)
	if cs := r.next(); len(cs.Machines) != 0 || !cs.Model || cs.Revision != rev {
		t.Fatalf("initial set of an empty model: got %+v, want no machines, Model, revision %d", cs, rev)
	}
	// A change after the initial set follows it.
	addMachines(t, s, empty.UUID, 1)
	if cs := r.next(); !reflect.DeepEqual(cs.Machines, []string{"0"}) || cs.Revision != revision(t, s) {
		t.Fatalf("set after the initial one: got %+v, want machine 0 at revision %d", cs, revision(t, s))
	}
}

func testWatchCoalesced(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	r := watch(t, s, m.UUID, 0)
	r.next()
	r.reset()
	// Fifty writes while nobody reads.
	const writes = 50
	addMachines(t, s, m.UUID, 3)
	for i := 0; i < writes-3; i++ {
		update(t, s, m.UUID, muster.MachineUpdate{ID: idOf(i % 3), StatusMessage: muster.Ptr("msg " + idOf(i))})
	}
	if err := s.UpdateModelSettings(ctx, m.UUID, muster.DefaultSettings()); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvents(ctx, []muster.Event{{ModelUUID: m.UUID, Kind: "note"}}); err != nil {
		t.Fatal(err)
	}
	rev := revision(t, s)
	r.until(rev)
	if got := r.last(); got != rev {
		t.Fatalf("last revision: got %d, want %d", got, rev)
	}
	if got, want := r.seen(), []string{"0", "1", "2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("machines: got %v, want %v", got, want)
	}
	if !r.model || !r.events {
		t.Fatalf("got model %v events %v, want both", r.model, r.events)
	}
	if n := len(r.sets) - 1; n >= writes {
		t.Fatalf("got %d change sets for %d writes made while nobody read, want them coalesced", n, writes)
	}
}

func testWatchIsolation(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	a := newModel(t, s, "a")
	b := newModel(t, s, "b")
	ra := watch(t, s, a.UUID, 0)
	rb := watch(t, s, b.UUID, 0)
	ra.next()
	rb.next()
	ra.reset()
	rb.reset()
	addMachines(t, s, b.UUID, 5)
	if err := s.UpdateModelSettings(ctx, b.UUID, muster.DefaultSettings()); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendEvents(ctx, []muster.Event{{ModelUUID: b.UUID, Kind: "note"}}); err != nil {
		t.Fatal(err)
	}
	revB := revision(t, s)
	addMachines(t, s, a.UUID, 1)
	revA := revision(t, s)
	ra.until(revA)
	rb.until(revB)
	if got := ra.seen(); !reflect.DeepEqual(got, []string{"0"}) || ra.model || ra.events {
		t.Fatalf("model a saw machines %v model %v events %v, want only machine 0", got, ra.model, ra.events)
	}
	if got := rb.seen(); !reflect.DeepEqual(got, ids(5)) || !rb.model || !rb.events {
		t.Fatalf("model b saw machines %v model %v events %v, want machines 0-4, model and events", got, rb.model, rb.events)
	}
	if ra.last() != revA {
		t.Fatalf("model a revision: got %d, want %d", ra.last(), revA)
	}
}

func testWatchKinds(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	addMachines(t, s, m.UUID, 2)
	rEv := watch(t, s, m.UUID, 0, muster.ChangeEvent)
	rMod := watch(t, s, m.UUID, 0, muster.ChangeModel)
	rMach := watch(t, s, m.UUID, 0, muster.ChangeMachine)
	rTwo := watch(t, s, m.UUID, 0, muster.ChangeMachine, muster.ChangeEvent)
	if cs := rEv.next(); len(cs.Machines) != 0 || cs.Model {
		t.Fatalf("initial set of an event watcher: got %+v, want no machines, no model", cs)
	}
	if cs := rMod.next(); len(cs.Machines) != 0 || !cs.Model {
		t.Fatalf("initial set of a model watcher: got %+v, want Model and no machines", cs)
	}
	if cs := rMach.next(); !reflect.DeepEqual(cs.Machines, ids(2)) || cs.Model || cs.Events {
		t.Fatalf("initial set of a machine watcher: got %+v, want machines 0 and 1 only", cs)
	}
	rTwo.next()
	for _, r := range []*recorder{rEv, rMod, rMach, rTwo} {
		r.reset()
	}
	update(t, s, m.UUID, muster.MachineUpdate{ID: "0", StatusMessage: muster.Ptr("x")})
	if err := s.UpdateModelSettings(ctx, m.UUID, muster.DefaultSettings()); err != nil {
		t.Fatal(err)
	}
	revModel := revision(t, s)
	if err := s.AppendEvents(ctx, []muster.Event{{ModelUUID: m.UUID, Kind: "note"}}); err != nil {
		t.Fatal(err)
	}
	revEvent := revision(t, s)
	addMachines(t, s, m.UUID, 1)
	revMachine := revision(t, s)

	rEv.until(revEvent)
	rMod.until(revModel)
	rMach.until(revMachine)
	rTwo.until(revMachine)
	for _, tc := range []struct {
		name          string
		r             *recorder
		machines      []string
		model, events bool
	}{
		{"event", rEv, []string{}, false, true},
		{"model", rMod, []string{}, true, false},
		{"machine", rMach, []string{"0", "2"}, false, false},
		{"machine and event", rTwo, []string{"0", "2"}, false, true},
	} {
		if got := tc.r.seen(); !reflect.DeepEqual(got, tc.machines) || tc.r.model != tc.model || tc.r.events != tc.events {
			t.Errorf("%s watcher: got machines %v model %v events %v, want %v %v %v", tc.name, got, tc.r.model, tc.r.events, tc.machines, tc.model, tc.events)
		}
	}
}

func testWatchResume(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	addMachines(t, s, m.UUID, 4)
	r := watch(t, s, m.UUID, 0)
	from := r.next().Revision
	if err := r.w.Close(); err != nil {
		t.Fatalf("close watcher: %v", err)
	}
	// Changes while no watcher runs, then while the store is closed.
	addMachines(t, s, m.UUID, 1) // 4
	update(t, s, m.UUID, muster.MachineUpdate{ID: "0", StatusMessage: muster.Ptr("while unwatched")})
	mid := revision(t, s)
	if err := s.Close(); err != nil {
		t.Fatalf("close store: %v", err)
	}
	s = h.store(t)
	update(t, s, m.UUID, muster.MachineUpdate{ID: "1", StatusMessage: muster.Ptr("after reopen")})
	if err := s.AppendEvents(ctx, []muster.Event{{ModelUUID: m.UUID, Kind: "note"}}); err != nil {
		t.Fatal(err)
	}
	final := revision(t, s)
	if final <= mid || mid <= from {
		t.Fatalf("revisions: got %d, %d, %d, want increasing across reopen", from, mid, final)
	}
	r = watch(t, s, m.UUID, from)
	r.until(final)
	if got, want := r.seen(), []string{"0", "1", "4"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("resumed from %d: got machines %v, want %v (no more, no fewer)", from, got, want)
	}
	if r.model || !r.events {
		t.Fatalf("resumed from %d: got model %v events %v, want events only", from, r.model, r.events)
	}
	r = watch(t, s, m.UUID, mid)
	r.until(final)
	if got, want := r.seen(), []string{"1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("resumed from %d: got machines %v, want %v", mid, got, want)
	}
}

// drain reads until the watcher's channel closes.
func drain(tb testing.TB, w muster.Watcher) {
	tb.Helper()
	deadline := time.After(waitFor)
	for {
		select {
		case _, ok := <-w.Changes():
			if !ok {
				return
			}
		case <-deadline:
			tb.Fatalf("watcher channel not closed within %s", waitFor)
		}
	}
}

func testWatchEnd(t *testing.T, h *harness) {
	s := h.store(t)
	m := newModel(t, s, "m")

	ctx, cancel := context.WithCancel(context.Background())
	w, err := s.Watch(ctx, m.UUID, 0)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	drain(t, w)
	if err := w.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("err after the context ended: got %v, want context.Canceled", err)
	}

	w, err = s.Watch(context.Background(), m.UUID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close watcher: %v", err)
	}
	drain(t, w)
	if err := w.Err(); err != nil {
		t.Fatalf("err after Close: got %v, want nil", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}

	w, err = s.Watch(context.Background(), m.UUID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close store: %v", err)
	}
	drain(t, w)
	if w.Err() == nil {
		t.Fatalf("err after the store closed: got nil, want an error")
	}
	w.Close()
}

func testWatchErrors(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	for _, tc := range []struct {
		name  string
		model string
		from  int64
		kinds []muster.ChangeKind
		code  string
	}{
		{"unknown model", "00000000-0000-4000-8000-000000000000", 0, nil, muster.ENotFound},
		{"negative revision", m.UUID, -1, nil, muster.EInvalid},
		{"bad kind", m.UUID, 0, []muster.ChangeKind{"machines"}, muster.EInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := s.Watch(ctx, tc.model, tc.from, tc.kinds...)
			if err == nil {
				w.Close()
			}
			wantCode(t, "watch", err, tc.code)
		})
	}
}

// testConcurrentWriters runs writers in parallel with a watcher that must
// see, for every machine, a change set after that machine's last write.
// -short makes it 8 × 100 writes instead of 8 × 500.
func testConcurrentWriters(t *testing.T, h *harness) {
	writers, writesEach := 8, 200
	if testing.Short() || raceEnabled {
		writesEach = 50
	}
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	other := newModel(t, s, "other")
	r := watch(t, s, m.UUID, 0)
	r.next()

	var mu sync.Mutex
	lastWrite := map[string]int64{} // id → revision read just before its last write
	var wg sync.WaitGroup
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var id string
			for i := 0; i < writesEach; i++ {
				if i%2 == 0 {
					ms, err := s.AddMachines(ctx, m.UUID, []muster.MachineTemplate{{}})
					if err != nil {
						t.Errorf("add machine: %v", err)
						return
					}
					id = ms[0].ID
				} else {
					// The update is the machine's last write: the watcher
					// must deliver it in a set newer than before.
					before, err := s.Revision(ctx)
					if err != nil {
						t.Errorf("revision: %v", err)
						return
					}
					err = s.UpdateMachines(ctx, m.UUID, []muster.MachineUpdate{{ID: id, StatusMessage: muster.Ptr("write " + strconv.Itoa(i))}})
					if err != nil {
						t.Errorf("update machine %s: %v", id, err)
						return
					}
					mu.Lock()
					lastWrite[id] = before
					mu.Unlock()
				}
				if i%50 == 0 { // noise in another model
					if _, err := s.AddMachines(ctx, other.UUID, []muster.MachineTemplate{{}}); err != nil {
						t.Errorf("add machine to other model: %v", err)
						return
					}
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case cs, ok := <-r.w.Changes():
			if !ok {
				t.Fatalf("watcher ended: %v", r.w.Err())
			}
			r.add(cs)
		case <-done:
			running = false
		case <-time.After(waitFor):
			t.Fatalf("no change set within %s while writers run", waitFor)
		}
	}
	if t.Failed() {
		return
	}
	r.until(revision(t, s))
	if got, want := len(lastWrite), writers*writesEach/2; got != want {
		t.Fatalf("machines written: got %d, want %d", got, want)
	}
	if got, want := len(r.machines), len(lastWrite); got != want {
		t.Fatalf("watcher saw %d machines, want %d", got, want)
	}
	for id, before := range lastWrite {
		if r.machines[id] <= before {
			t.Fatalf("machine %s: last write after revision %d, newest change set holding it has revision %d: a change was missed", id, before, r.machines[id])
		}
	}
	ms, err := s.Machines(ctx, m.UUID, nil)
	if err != nil || len(ms) != len(lastWrite) {
		t.Fatalf("machines: got %d (err %v), want %d", len(ms), err, len(lastWrite))
	}
}
