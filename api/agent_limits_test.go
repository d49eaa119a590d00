package api_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// loginAgent provisions machine id and logs its agent in.
func loginAgent(t *testing.T, h *harness, id string) *api.Client {
	t.Helper()
	pw, nonce := h.provision(t, id, "a")
	res, err := h.anon.Login(context.Background(), api.LoginRequest{Model: "default", Machine: id, Password: pw, Nonce: nonce})
	if err != nil {
		t.Fatal(err)
	}
	return h.anon.WithToken(res.Token)
}

// TestAgentFieldsBounded checks S6: over-long messages, addresses that
// are not IP addresses and hardware names with control characters are
// refused, and nothing of the refused update is stored.
func TestAgentFieldsBounded(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 1})
	agent := loginAgent(t, h, "0")
	before := h.machine(t, "0")
	for _, tc := range []struct {
		name string
		u    api.AgentUpdate
		want string
	}{
		{"long message", api.AgentUpdate{Status: muster.Ptr("started"), StatusMessage: muster.Ptr(strings.Repeat("x", 1025))}, "at most 1024"},
		{"not an address", api.AgentUpdate{Addresses: &[]string{"10.0.0.1", "example.com"}}, `"example.com"`},
		{"escape in an address", api.AgentUpdate{Addresses: &[]string{"\x1b[2J"}}, `\x1b`},
		{"too many addresses", api.AgentUpdate{Addresses: muster.Ptr(make([]string, 65))}, "at most 64"},
		{"escape in arch", api.AgentUpdate{Hardware: &muster.Hardware{Arch: "amd64\x1b[31m"}}, "hardware arch"},
		{"long zone", api.AgentUpdate{Hardware: &muster.Hardware{AvailabilityZone: strings.Repeat("z", 65)}}, "availability-zone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := agent.SetAgentMachine(ctx, "default", "0", tc.u)
			wantCode(t, err, muster.EInvalid)
			if !strings.Contains(err.Error(), tc.want) || strings.ContainsRune(err.Error(), 0x1b) {
				t.Fatalf("got %q, want it to name %q without raw control characters", err, tc.want)
			}
		})
	}
	after := h.machine(t, "0")
	if after.Status != before.Status || after.StatusMessage != before.StatusMessage || len(after.Instance.Addresses) != 0 || after.Instance.Hardware != before.Instance.Hardware {
		t.Fatalf("refused updates changed the machine: before %+v, after %+v", before, after)
	}
	// Within the bounds is fine.
	if _, err := agent.SetAgentMachine(ctx, "default", "0", api.AgentUpdate{Status: muster.Ptr("started"),
		StatusMessage: muster.Ptr(strings.Repeat("m", 1024)), Addresses: &[]string{"10.1.0.5", "fd00::1"},
		Hardware: &muster.Hardware{Arch: "arm64", AvailabilityZone: "us-east-1a"}}); err != nil {
		t.Fatalf("update within bounds: %v", err)
	}
}

// TestAgentWritesRateLimited checks S6: one agent cannot write without
// bound; its budget comes back with time.
func TestAgentWritesRateLimited(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 1})
	agent := loginAgent(t, h, "0")
	ok, refused := 0, 0
	for i := 0; i < 50; i++ {
		_, err := agent.SetAgentMachine(ctx, "default", "0", api.AgentUpdate{StatusMessage: muster.Ptr("m" + strings.Repeat("x", i))})
		switch {
		case err == nil:
			ok++
		case muster.ErrorCode(err) == muster.EUnavailable:
			refused++
		default:
			t.Fatalf("write %d: %v", i, err)
		}
	}
	if ok != 10 || refused != 40 {
		t.Fatalf("50 writes at once: got %d accepted, %d refused, want 10 and 40", ok, refused)
	}
	h.clock.Advance(time.Minute)
	if _, err := agent.SetAgentMachine(ctx, "default", "0", api.AgentUpdate{StatusMessage: muster.Ptr("later")}); err != nil {
		t.Fatalf("write a minute later: %v", err)
	}
}

// TestConcurrentLoginsLeaveOneToken checks the login race of S6: however
// logins for one machine interleave, only the newest token stays valid.
func TestConcurrentLoginsLeaveOneToken(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 1})
	pw, nonce := h.provision(t, "0", "a")
	for round := 0; round < 5; round++ {
		const n = 8
		tokens := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := h.anon.Login(ctx, api.LoginRequest{Model: "default", Machine: "0", Password: pw, Nonce: nonce})
				if err != nil {
					t.Error(err)
					return
				}
				tokens[i] = res.Token
			}()
		}
		wg.Wait()
		valid := 0
		for _, tok := range tokens {
			if _, err := h.anon.WithToken(tok).AgentMachine(ctx, "default", "0"); err == nil {
				valid++
			}
		}
		if valid != 1 {
			t.Fatalf("round %d: %d of %d concurrent logins' tokens are valid, want exactly 1", round, valid, n)
		}
	}
}
