package sqlstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/testutil"
)

// TestPostgresLeaseNotStarvedByWrites saturates the store's connection
// pool with writers that all wait for a row lock another session holds,
// and checks that lease claims and releases still succeed at once: they
// run on the store's own lease connection.
func TestPostgresLeaseNotStarvedByWrites(t *testing.T) {
	p := newPGSchemas(t)
	s := p.open(t, "starve")
	defer s.Close()
	ctx := context.Background()
	m, err := s.CreateModel(ctx, muster.Model{Name: "m", Provider: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	// Every write that records a change takes the revision_counter row
	// last; holding it from another session parks the writers there, each
	// with a connection of the pool.
	p.mu.Lock()
	schema := p.schemas["starve"]
	p.mu.Unlock()
	lock, err := p.admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.ExecContext(ctx, `SELECT revision FROM "`+schema+`".revision_counter FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	const writers = 64 // more than the pool holds
	errs := make(chan error, writers)
	for range writers {
		go func() {
			_, err := s.AddMachines(ctx, m.UUID, []muster.MachineTemplate{{}})
			errs <- err
		}()
	}
	testutil.Eventually(t, "the pool saturated: a read waits for a connection", func() bool {
		rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := s.Model(rctx, m.UUID)
		return errors.Is(err, context.DeadlineExceeded)
	})

	for i := range 5 {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		held, _, err := s.ClaimLease(cctx, "model/"+m.UUID, "me", 2500*time.Millisecond)
		cancel()
		if err != nil || !held {
			t.Fatalf("claim %d while the pool is saturated: held %v, err %v; want held", i, held, err)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := s.ReleaseLease(rctx, "model/"+m.UUID, "me"); err != nil {
		t.Fatalf("release while the pool is saturated: %v", err)
	}

	if err := lock.Rollback(); err != nil {
		t.Fatal(err)
	}
	for range writers {
		if err := <-errs; err != nil {
			t.Errorf("writer: %v", err)
		}
	}
}
