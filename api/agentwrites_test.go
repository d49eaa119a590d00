package api

import (
	"context"
	"sync"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/testutil"
)

// gatedStore holds the first UpdateMachines until released, and counts
// the calls.
type gatedStore struct {
	muster.Store
	gate chan struct{}
	once sync.Once
	mu   sync.Mutex
	n    int
}

func (g *gatedStore) UpdateMachines(ctx context.Context, model string, us []muster.MachineUpdate, es ...muster.Event) error {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
	g.once.Do(func() { <-g.gate })
	return g.Store.UpdateMachines(ctx, model, us, es...)
}

func (g *gatedStore) calls() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

// TestAgentWritesGroupCommit: writes queued while a transaction runs go
// in the next one together, each with its own outcome: a write for a
// removed machine fails alone.
func TestAgentWritesGroupCommit(t *testing.T) {
	ctx := context.Background()
	st, m := storeWithModel(t)
	if _, err := st.AddMachines(ctx, m.UUID, make([]muster.MachineTemplate, 6)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		ids   []string // queued behind the first write
		calls int      // UpdateMachines calls in all
	}{
		{"all good", []string{"1", "2", "3", "4"}, 2},
		{"one gone", []string{"1", "2", "99", "4"}, 2 + 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gs := &gatedStore{Store: st, gate: make(chan struct{})}
			a := newAgentWrites(gs)
			write := func(id string) error {
				msg := "from " + tc.name
				return a.write(ctx, m.UUID, &muster.MachineUpdate{ID: id, StatusMessage: &msg},
					muster.Event{ModelUUID: m.UUID, MachineID: id, Kind: "test", Message: msg})
			}
			first := make(chan error, 1)
			go func() { first <- write("0") }()
			testutil.Eventually(t, "first write in the store", func() bool { return gs.calls() == 1 })
			errs := make([]chan error, len(tc.ids))
			for i, id := range tc.ids {
				errs[i] = make(chan error, 1)
				go func() { errs[i] <- write(id) }()
			}
			testutil.Eventually(t, "writes queued", func() bool {
				a.mu.Lock()
				defer a.mu.Unlock()
				return len(a.pending[m.UUID]) == len(tc.ids)
			})
			close(gs.gate)
			if err := <-first; err != nil {
				t.Fatalf("first write: %v", err)
			}
			for i, id := range tc.ids {
				err := <-errs[i]
				if want := id == "99"; (err != nil) != want || want && !muster.IsCode(err, muster.ENotFound) {
					t.Errorf("write of machine %s: %v", id, err)
				}
				if id != "99" {
					if mc, _ := st.Machine(ctx, m.UUID, id); mc.StatusMessage != "from "+tc.name {
						t.Errorf("machine %s: message %q not written", id, mc.StatusMessage)
					}
				}
			}
			if got := gs.calls(); got != tc.calls {
				t.Errorf("store transactions: %d, want %d", got, tc.calls)
			}
		})
	}
}
