package sqlstore_test

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/sqlstore"
)

// never is a poll interval the tests never reach: watchers wake only on
// notifications (or on the listener's reconnection).
const never = time.Hour

// nextSet waits for a change set holding machine id.
func nextSet(tb testing.TB, w muster.Watcher, id string) {
	tb.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case cs, ok := <-w.Changes():
			if !ok {
				tb.Fatalf("watcher ended: %v", w.Err())
			}
			for _, m := range cs.Machines {
				if m == id {
					return
				}
			}
		case <-timeout:
			tb.Fatalf("no change set with machine %s within 20s", id)
		}
	}
}

func addOne(tb testing.TB, s muster.Store, model string) string {
	tb.Helper()
	ms, err := s.AddMachines(context.Background(), model, []muster.MachineTemplate{{}})
	if err != nil {
		tb.Fatalf("add machine: %v", err)
	}
	return ms[0].ID
}

// TestPostgresNotifyAcrossStores: a write through one store wakes the
// watchers of another store on the same database through NOTIFY.
func TestPostgresNotifyAcrossStores(t *testing.T) {
	p := newPGSchemas(t)
	a := p.open(t, "notify", sqlstore.WithPollInterval(never))
	defer a.Close()
	b := p.open(t, "notify", sqlstore.WithPollInterval(never))
	defer b.Close()
	ctx := context.Background()
	m, err := b.CreateModel(ctx, muster.Model{Name: "m", Provider: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := a.Watch(ctx, m.UUID, 0, muster.ChangeMachine)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	<-w.Changes() // the initial set
	for range 3 {
		nextSet(t, w, addOne(t, b, m.UUID))
	}
}

// TestPostgresListenerReconnect: when the listening connection is killed,
// the watchers still see every change: the listener wakes them, reconnects
// and wakes them again, and they read the change log.
func TestPostgresListenerReconnect(t *testing.T) {
	p := newPGSchemas(t)
	a := p.open(t, "reconnect", sqlstore.WithPollInterval(never))
	defer a.Close()
	b := p.open(t, "reconnect", sqlstore.WithPollInterval(never))
	defer b.Close()
	ctx := context.Background()
	m, err := b.CreateModel(ctx, muster.Model{Name: "m", Provider: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := a.Watch(ctx, m.UUID, 0, muster.ChangeMachine)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	<-w.Changes()
	p.mu.Lock()
	schema := p.schemas["reconnect"]
	p.mu.Unlock()
	const listening = `FROM pg_stat_activity WHERE query = 'LISTEN "muster_' || left(md5($1), 20) || '"'`
	for round := range 3 {
		// Wait for both listeners (a's and b's) to listen again, then
		// kill them.
		deadline := time.Now().Add(20 * time.Second)
		for {
			var n int
			if err := p.admin.QueryRow(`SELECT count(*) `+listening, schema).Scan(&n); err != nil {
				t.Fatalf("count listeners: %v", err)
			}
			if n == 2 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d listeners, want 2 within 20s", round, n)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if _, err := p.admin.Exec(`SELECT pg_terminate_backend(pid) `+listening, schema); err != nil {
			t.Fatalf("kill listeners: %v", err)
		}
		// Changes made while the listener is down and after it is back.
		nextSet(t, w, addOne(t, b, m.UUID))
		nextSet(t, w, addOne(t, b, m.UUID))
	}
}

// claimRecord is one successful claim: the database time it was made at
// (its expiry less the TTL) and its expiry.
type claimRecord struct {
	holder    string
	at, until time.Time
}

// TestPostgresLeaseTwoStores: two stores (two controllers) on the same
// database keep claiming one lease. Exactly one holds it at any time on
// the database clock; when the holder stops renewing, the other gets it
// once the TTL has passed.
func TestPostgresLeaseTwoStores(t *testing.T) {
	p := newPGSchemas(t)
	const ttl = 400 * time.Millisecond
	stores := map[string]*sqlstore.Store{
		"ctl-a": p.open(t, "lease"),
		"ctl-b": p.open(t, "lease"),
	}
	for _, s := range stores {
		defer s.Close()
	}
	var mu sync.Mutex
	var claims []claimRecord
	stop := map[string]chan struct{}{}
	var wg sync.WaitGroup
	for holder, s := range stores {
		stop[holder] = make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				held, until, err := s.ClaimLease(context.Background(), "model/m", holder, ttl)
				if err != nil {
					t.Errorf("claim by %s: %v", holder, err)
					return
				}
				if held {
					mu.Lock()
					claims = append(claims, claimRecord{holder, until.Add(-ttl), until})
					mu.Unlock()
				}
				select {
				case <-stop[holder]:
					return
				case <-time.After(ttl / 8):
				}
			}
		}()
	}
	holder := func() string {
		h, _, err := stores["ctl-a"].LeaseHolder(context.Background(), "model/m")
		if err != nil {
			t.Fatalf("lease holder: %v", err)
		}
		return h
	}
	waitHolder := func(want func(string) bool) string {
		deadline := time.Now().Add(20 * time.Second)
		for {
			if h := holder(); want(h) {
				return h
			}
			if time.Now().After(deadline) {
				t.Fatalf("lease holder: not as wanted within 20s")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := waitHolder(func(h string) bool { return h != "" })
	time.Sleep(3 * ttl) // both keep claiming for a while
	close(stop[first])  // the holder dies: it stops renewing
	second := waitHolder(func(h string) bool { return h != "" && h != first })
	for h, ch := range stop {
		if h != first {
			close(ch)
		}
	}
	wg.Wait()

	// Check the claims on the database clock: a claim by another holder
	// comes only after every earlier claim expired.
	sort.Slice(claims, func(i, j int) bool { return claims[i].at.Before(claims[j].at) })
	takeovers := 0
	for i, c := range claims {
		for _, e := range claims[:i] {
			if e.holder != c.holder && e.until.After(c.at) {
				t.Fatalf("%s claimed the lease at %v while %s held it until %v", c.holder, c.at, e.holder, e.until)
			}
		}
		if i > 0 && claims[i-1].holder != c.holder {
			takeovers++
		}
	}
	if takeovers == 0 {
		t.Fatalf("claims: %s never took over from %s", second, first)
	}
}
