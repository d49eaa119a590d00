package api_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/internal/testutil"
)

// countingStore counts the store calls heartbeats could cost.
type countingStore struct {
	muster.Store
	mu      sync.Mutex
	batches [][]string // ids of each RecordHeartbeats call
	writes  int        // UpdateMachines and AppendEvents calls
	reads   int        // Machine calls
}

func (c *countingStore) RecordHeartbeats(ctx context.Context, model string, ids []string, at time.Time) (map[string]muster.Life, error) {
	c.mu.Lock()
	c.batches = append(c.batches, slices.Sorted(slices.Values(ids)))
	c.mu.Unlock()
	return c.Store.RecordHeartbeats(ctx, model, ids, at)
}

func (c *countingStore) UpdateMachines(ctx context.Context, model string, us []muster.MachineUpdate, es ...muster.Event) error {
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.Store.UpdateMachines(ctx, model, us, es...)
}

func (c *countingStore) AppendEvents(ctx context.Context, es []muster.Event) error {
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.Store.AppendEvents(ctx, es)
}

func (c *countingStore) Machine(ctx context.Context, model, id string) (muster.Machine, error) {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	return c.Store.Machine(ctx, model, id)
}

func (c *countingStore) counts() (batches [][]string, writes, reads int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.batches), c.writes, c.reads
}

// loginAgents provisions and logs in the agents of machines ids.
func (h *harness) loginAgents(tb testing.TB, ids []string) map[string]*api.Client {
	tb.Helper()
	agents := map[string]*api.Client{}
	for _, id := range ids {
		pw, nonce := h.provision(tb, id, "a")
		res, err := h.anon.Login(context.Background(), api.LoginRequest{Model: "default", Machine: id, Password: pw, Nonce: nonce})
		if err != nil {
			tb.Fatal(err)
		}
		agents[id] = h.anon.WithToken(res.Token)
	}
	return agents
}

// TestHeartbeatsWrittenInBatches: heartbeats cost the store nothing when
// they arrive; once per HeartbeatFlushEvery all of them are written in one
// RecordHeartbeats call, and none when nobody beat.
func TestHeartbeatsWrittenInBatches(t *testing.T) {
	cs := &countingStore{}
	h := newHarness(t, func(c *api.Config) { cs.Store = c.Store; c.Store = cs })
	ctx := context.Background()
	ids := h.addMachines(t, api.AddMachinesRequest{Count: 5})
	agents := h.loginAgents(t, ids)
	h.srv.Start()
	// The logins are written at once, as last seen now.
	testutil.Eventually(t, "logins written", func() bool {
		for _, m := range h.machines(t) {
			if !m.LastSeen.Equal(start) {
				return false
			}
		}
		return true
	})
	<-h.clock.WaitForTimers(1)
	batches0, writes0, reads0 := cs.counts()
	for range 3 {
		for _, id := range ids {
			hb, err := agents[id].Heartbeat(ctx, "default", id)
			if err != nil || hb.Life != "alive" {
				t.Fatalf("heartbeat of %s: %+v, %v", id, hb, err)
			}
		}
	}
	if batches, writes, reads := cs.counts(); len(batches) != len(batches0) || writes != writes0 || reads != reads0 {
		t.Fatalf("15 heartbeats cost %d heartbeat writes, %d other writes, %d machine reads; want none",
			len(batches)-len(batches0), writes-writes0, reads-reads0)
	}
	h.clock.Advance(api.HeartbeatFlushEvery)
	testutil.Eventually(t, "one batch written", func() bool { b, _, _ := cs.counts(); return len(b) > len(batches0) })
	<-h.clock.WaitForTimers(1)
	batches, _, _ := cs.counts()
	if got := batches[len(batches0):]; len(got) != 1 || !slices.Equal(got[0], slices.Sorted(slices.Values(ids))) {
		t.Fatalf("batches after one interval: %v, want one of %v", got, ids)
	}
	for _, m := range h.machines(t) {
		if want := start.Add(api.HeartbeatFlushEvery); !m.LastSeen.Equal(want) {
			t.Errorf("machine %s last seen %v, want %v", m.ID, m.LastSeen, want)
		}
	}
	// Nothing beat since: the next interval writes nothing.
	h.clock.Advance(api.HeartbeatFlushEvery)
	<-h.clock.WaitForTimers(1)
	if b, _, _ := cs.counts(); len(b) != len(batches) {
		t.Fatalf("an interval without heartbeats wrote %d batches", len(b)-len(batches))
	}
	if got := h.srv.AgentStats(); got.Requests != 5+15 || got.HeartbeatWrites != int64(len(batches)) {
		t.Errorf("agent stats %+v, want 20 requests and %d heartbeat writes", got, len(batches))
	}
}

// TestHeartbeatLifeFollowsTheStore: a life changed behind the server's
// back (the provisioner, another controller) reaches the agents'
// heartbeats with the next batch, and a removed machine's token is
// revoked by it.
func TestHeartbeatLifeFollowsTheStore(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	ids := h.addMachines(t, api.AddMachinesRequest{Count: 2})
	agents := h.loginAgents(t, ids)
	h.srv.Start()
	<-h.clock.WaitForTimers(1)
	if err := h.store.UpdateMachines(ctx, h.model.UUID, []muster.MachineUpdate{
		{ID: "0", Life: muster.Ptr(muster.LifeDead)}, {ID: "1", Life: muster.Ptr(muster.LifeDead)}}); err != nil {
		t.Fatal(err)
	}
	if err := h.store.RemoveMachines(ctx, h.model.UUID, []string{"1"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := agents[id].Heartbeat(ctx, "default", id); err != nil {
			t.Fatal(err)
		}
	}
	h.clock.Advance(api.HeartbeatFlushEvery)
	testutil.Eventually(t, "life dead in the heartbeat", func() bool {
		hb, err := agents["0"].Heartbeat(ctx, "default", "0")
		return err == nil && hb.Life == "dead"
	})
	h.clock.Advance(api.HeartbeatFlushEvery)
	testutil.Eventually(t, "removed machine's token revoked", func() bool {
		_, err := agents["1"].Heartbeat(ctx, "default", "1")
		return muster.IsCode(err, muster.EUnauthorized)
	})
}
