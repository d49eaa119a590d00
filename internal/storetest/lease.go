package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
)

// shortTTL is the TTL of the leases and registrations the tests let
// expire. The tests wait for the expiry by polling (bounded by waitFor);
// they never assert how long it took.
const shortTTL = 200 * time.Millisecond

func claim(tb testing.TB, s muster.Store, name, holder string, ttl time.Duration) (bool, time.Time) {
	tb.Helper()
	held, exp, err := s.ClaimLease(context.Background(), name, holder, ttl)
	if err != nil {
		tb.Fatalf("claim lease %s for %s: %v", name, holder, err)
	}
	return held, exp
}

func leaseHolder(tb testing.TB, s muster.Store, name string) (string, time.Time) {
	tb.Helper()
	h, exp, err := s.LeaseHolder(context.Background(), name)
	if err != nil {
		tb.Fatalf("lease holder of %s: %v", name, err)
	}
	return h, exp
}

// eventually polls cond until it holds, failing after waitFor.
func eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s", what, waitFor)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testLeases(t *testing.T, h *harness) {
	s := h.store(t)
	ctx := ctxFor(t)
	if got, exp := leaseHolder(t, s, "model/a"); got != "" || !exp.IsZero() {
		t.Fatalf("holder of an unclaimed lease: got %q %v, want none", got, exp)
	}
	held, expA := claim(t, s, "model/a", "ctl-a", time.Hour)
	if !held {
		t.Fatalf("claim free lease: got held false, want true")
	}
	if got, exp := leaseHolder(t, s, "model/a"); got != "ctl-a" || !exp.Equal(expA) {
		t.Fatalf("holder: got %q until %v, want ctl-a until %v", got, exp, expA)
	}
	held, exp := claim(t, s, "model/a", "ctl-b", time.Hour)
	if held || !exp.Equal(expA) {
		t.Fatalf("claim held lease: got held %v until %v, want false and the holder's expiry %v", held, exp, expA)
	}
	// Another lease is independent.
	if held, _ := claim(t, s, "model/b", "ctl-b", time.Hour); !held {
		t.Fatalf("claim another free lease: got held false, want true")
	}
	// The holder extends its lease.
	held, expA2 := claim(t, s, "model/a", "ctl-a", 2*time.Hour)
	if !held || !expA2.After(expA) {
		t.Fatalf("extend: got held %v until %v, want true after %v", held, expA2, expA)
	}
	// Only the holder releases.
	if err := s.ReleaseLease(ctx, "model/a", "ctl-b"); err != nil {
		t.Fatalf("release by another: %v", err)
	}
	if got, _ := leaseHolder(t, s, "model/a"); got != "ctl-a" {
		t.Fatalf("holder after release by another: got %q, want ctl-a", got)
	}
	if err := s.ReleaseLease(ctx, "model/a", "ctl-a"); err != nil {
		t.Fatalf("release: %v", err)
	}
	if got, _ := leaseHolder(t, s, "model/a"); got != "" {
		t.Fatalf("holder after release: got %q, want none", got)
	}
	if held, _ := claim(t, s, "model/a", "ctl-b", time.Hour); !held {
		t.Fatalf("claim released lease: got held false, want true")
	}
	if got, _ := leaseHolder(t, s, "model/b"); got != "ctl-b" {
		t.Fatalf("holder of the other lease: got %q, want ctl-b", got)
	}

	// Leases persist.
	s.Close()
	s = h.store(t)
	if got, _ := leaseHolder(t, s, "model/a"); got != "ctl-b" {
		t.Fatalf("holder after reopen: got %q, want ctl-b", got)
	}
}

func testLeaseExpiry(t *testing.T, h *harness) {
	s := h.store(t)
	held, _ := claim(t, s, "l", "ctl-a", shortTTL)
	if !held {
		t.Fatalf("claim free lease: got held false, want true")
	}
	// Once the lease expires it is free, and another holder takes it.
	eventually(t, "expired lease freed", func() bool {
		got, _ := leaseHolder(t, s, "l")
		return got == ""
	})
	eventually(t, "expired lease taken", func() bool {
		held, _ := claim(t, s, "l", "ctl-b", time.Hour)
		return held
	})
	if got, _ := leaseHolder(t, s, "l"); got != "ctl-b" {
		t.Fatalf("holder after taking the expired lease: got %q, want ctl-b", got)
	}
	if held, _ := claim(t, s, "l", "ctl-a", shortTTL); held {
		t.Fatalf("former holder claims the taken lease: got held true, want false")
	}
}

// testLeaseContention: many claimants at once, exactly one wins.
func testLeaseContention(t *testing.T, h *harness) {
	s := h.store(t)
	const n = 8
	held := make([]bool, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			held[i], _, err = s.ClaimLease(context.Background(), "contended", "ctl-"+idOf(i), time.Hour)
			if err != nil {
				t.Errorf("claim %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	winner := ""
	for i, ok := range held {
		if ok {
			if winner != "" {
				t.Fatalf("lease held by both %s and ctl-%d", winner, i)
			}
			winner = "ctl-" + idOf(i)
		}
	}
	if got, _ := leaseHolder(t, s, "contended"); winner == "" || got != winner {
		t.Fatalf("holder: got %q, want the one winner %q", got, winner)
	}
}

func testLeaseErrors(t *testing.T, h *harness) {
	s := h.store(t)
	ctx := ctxFor(t)
	for _, tc := range []struct {
		name, lease, holder string
		ttl                 time.Duration
	}{
		{"empty name", "", "ctl-a", time.Minute},
		{"empty holder", "l", "", time.Minute},
		{"zero ttl", "l", "ctl-a", 0},
		{"negative ttl", "l", "ctl-a", -time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := s.ClaimLease(ctx, tc.lease, tc.holder, tc.ttl)
			wantCode(t, "claim", err, muster.EInvalid)
		})
	}
	if got, _ := leaseHolder(t, s, "l"); got != "" {
		t.Fatalf("holder after bad claims: got %q, want none", got)
	}
}

func controllers(tb testing.TB, s muster.Store) []muster.ControllerInfo {
	tb.Helper()
	cs, err := s.Controllers(context.Background())
	if err != nil {
		tb.Fatalf("controllers: %v", err)
	}
	return cs
}

func controllerIDs(cs []muster.ControllerInfo) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

func testControllerRegistry(t *testing.T, h *harness) {
	s := h.store(t)
	ctx := ctxFor(t)
	if cs := controllers(t, s); len(cs) != 0 {
		t.Fatalf("controllers of a new store: got %v, want none", cs)
	}
	for _, tc := range []struct {
		name, id, addr string
		ttl            time.Duration
	}{
		{"empty id", "", "10.0.0.1:17070", time.Minute},
		{"empty address", "c1", "", time.Minute},
		{"zero ttl", "c1", "10.0.0.1:17070", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, "register", s.RegisterController(ctx, tc.id, tc.addr, tc.ttl), muster.EInvalid)
		})
	}
	register := func(id, addr string, ttl time.Duration) {
		t.Helper()
		if err := s.RegisterController(ctx, id, addr, ttl); err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
	}
	register("c2", "10.0.0.2:17070", time.Hour)
	register("c1", "10.0.0.1:17070", time.Hour)
	register("c3", "10.0.0.3:17070", shortTTL)
	// c1 moves: registering again replaces its address.
	register("c1", "10.0.0.9:17070", time.Hour)
	eventually(t, "controller c3 expired", func() bool {
		return len(controllers(t, s)) == 2
	})
	cs := controllers(t, s)
	if got, want := controllerIDs(cs), []string{"c1", "c2"}; !equalStrings(got, want) {
		t.Fatalf("live controllers: got %v, want %v", got, want)
	}
	if cs[0].Address != "10.0.0.9:17070" || cs[1].Address != "10.0.0.2:17070" {
		t.Fatalf("addresses: got %s and %s, want 10.0.0.9:17070 and 10.0.0.2:17070", cs[0].Address, cs[1].Address)
	}
	if cs[0].Expires.IsZero() {
		t.Fatalf("controller c1 has no expiry")
	}
	// A registration that lapsed comes back when it registers again.
	register("c3", "10.0.0.3:17070", time.Hour)
	if got, want := controllerIDs(controllers(t, s)), []string{"c1", "c2", "c3"}; !equalStrings(got, want) {
		t.Fatalf("live controllers after c3 registers again: got %v, want %v", got, want)
	}
}
