package api

import (
	"strconv"
	"sync"
	"testing"
)

// TestAddSessionRace drives the login race of S6 without HTTP, where it
// is dense enough to show: however concurrent logins for one machine
// interleave, exactly one of their sessions is left.
func TestAddSessionRace(t *testing.T) {
	s := &Server{}
	h := newHeartbeats(s)
	for round := 0; round < 2000; round++ {
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h.addSession(strconv.Itoa(round)+"/"+strconv.Itoa(i), &agentSession{modelUUID: "m", machineID: "0"})
			}()
		}
		wg.Wait()
		n := 0
		s.sessions.Range(func(_, _ any) bool { n++; return true })
		if n != 1 {
			t.Fatalf("round %d: %d sessions left for one machine, want 1", round, n)
		}
	}
}
