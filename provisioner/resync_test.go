package provisioner_test

import (
	"context"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/provisioner"
)

// resyncStore lets a test hand the provisioner's watcher a change set of
// its own, as a store does after trimming past the watcher (S10).
type resyncStore struct {
	provisioner.Store
	inject chan muster.ChangeSet
}

func (s resyncStore) Watch(ctx context.Context, model string, from int64, kinds ...muster.ChangeKind) (muster.Watcher, error) {
	w, err := s.Store.Watch(ctx, model, from, kinds...)
	if err != nil {
		return nil, err
	}
	m := &mergedWatcher{Watcher: w, out: make(chan muster.ChangeSet), done: make(chan struct{})}
	go func() {
		defer close(m.out)
		in := w.Changes()
		for {
			var cs muster.ChangeSet
			var ok bool
			select {
			case cs, ok = <-in:
				if !ok {
					return
				}
			case cs = <-s.inject:
			case <-m.done:
				return
			}
			select {
			case m.out <- cs:
			case <-m.done:
				return
			}
		}
	}()
	return m, nil
}

type mergedWatcher struct {
	muster.Watcher
	out  chan muster.ChangeSet
	done chan struct{}
}

func (m *mergedWatcher) Changes() <-chan muster.ChangeSet { return m.out }
func (m *mergedWatcher) Close() error {
	close(m.done)
	return m.Watcher.Close()
}

// TestResyncRunsAFullPass: a change set marked Resync makes the engine
// reconcile in full (here: it lists the cloud and finds an unknown
// instance), not just look at the machines it names.
func TestResyncRunsAFullPass(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) {
		s.HarvestMode = muster.HarvestUnknown
		s.HarvestMinAge = 0
	}))
	rs := resyncStore{Store: h.store, inject: make(chan muster.ChangeSet)}
	h.store2 = rs
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 0 running", h.running("0"))
	inst, err := h.cloud.AddInstance("a", controllerUUID, h.model.UUID)
	if err != nil {
		t.Fatal(err)
	}
	// An ordinary change does not list the cloud (E1): the instance stays.
	h.update(muster.MachineUpdate{ID: "0", StatusMessage: muster.Ptr("ordinary change")})
	h.quiesce()
	if _, ok := h.cloudInstances()[inst.ID]; !ok {
		t.Fatalf("unknown instance %s stopped on an incremental change, want it found only by a full pass", inst.ID)
	}
	rev, err := h.store.Revision(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	rs.inject <- muster.ChangeSet{Revision: rev, Machines: []string{"0"}, Resync: true}
	h.waitFor("unknown instance harvested after the resync", func() bool { _, ok := h.cloudInstances()[inst.ID]; return !ok })
}
