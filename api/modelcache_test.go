package api

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/fakeclock"
	"github.com/musterhq/muster/sqlstore"
)

// storeWithModel opens a store in a temporary directory with one sim
// model "m"; the store is closed when the test ends.
func storeWithModel(t *testing.T) (*sqlstore.Store, muster.Model) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlstore.Open(ctx, filepath.Join(t.TempDir(), "muster.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := st.CreateModel(ctx, muster.Model{Name: "m", Provider: "sim", Settings: muster.DefaultSettings()})
	if err != nil {
		t.Fatal(err)
	}
	return st, m
}

// countingStore counts Model reads.
type countingStore struct {
	muster.Store
	reads atomic.Int32
}

func (c *countingStore) Model(ctx context.Context, ref string) (muster.Model, error) {
	c.reads.Add(1)
	return c.Store.Model(ctx, ref)
}

// TestModelCache: within modelCacheTTL a model is read once; after it, or
// changed meanwhile, it is read again; an unknown model is never kept.
func TestModelCache(t *testing.T) {
	ctx := context.Background()
	st, m := storeWithModel(t)
	cs := &countingStore{Store: st}
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	var c modelCache
	for range 5 {
		got, err := c.get(ctx, cs, clock, m.UUID)
		if err != nil || got.Name != "m" {
			t.Fatalf("get: %v %v", got.Name, err)
		}
	}
	if n := cs.reads.Load(); n != 1 {
		t.Fatalf("%d reads within the TTL, want 1", n)
	}
	s := m.Settings
	s.AgentHeartbeat = 7 * time.Second
	if err := st.UpdateModelSettings(ctx, m.UUID, s); err != nil {
		t.Fatal(err)
	}
	clock.Advance(modelCacheTTL)
	got, err := c.get(ctx, cs, clock, m.UUID)
	if err != nil || got.Settings.AgentHeartbeat != 7*time.Second || cs.reads.Load() != 2 {
		t.Fatalf("after the TTL: heartbeat %v, %d reads, err %v; want the new setting read", got.Settings.AgentHeartbeat, cs.reads.Load(), err)
	}
	for range 2 {
		if _, err := c.get(ctx, cs, clock, "nope"); !muster.IsCode(err, muster.ENotFound) {
			t.Fatalf("unknown model: %v", err)
		}
	}
	if n := cs.reads.Load(); n != 4 {
		t.Fatalf("%d reads, want 4: an unknown model is asked for each time", n)
	}
}
