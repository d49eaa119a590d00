package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// collect reads the stream until n log events have arrived, and returns
// them with the machine ids of the machines messages seen meanwhile.
func collect(tb testing.TB, s *api.EventStream, n int) ([]api.EventInfo, []string) {
	tb.Helper()
	var es []api.EventInfo
	var machines []string
	timeout := time.After(10 * time.Second)
	for len(es) < n {
		select {
		case msg, ok := <-s.C():
			if !ok {
				tb.Fatalf("stream ended after %d events (err %v), want %d", len(es), s.Err(), n)
			}
			if msg.Event != nil {
				es = append(es, *msg.Event)
			}
			machines = append(machines, msg.Machines...)
		case <-timeout:
			tb.Fatalf("timed out after %d events, want %d", len(es), n)
		}
	}
	return es, machines
}

func seqsOf(es []api.EventInfo) []int64 {
	var out []int64
	for _, e := range es {
		out = append(out, e.Seq)
	}
	return out
}

func TestEventStream(t *testing.T) {
	h := newHarness(t)
	h.addMachines(t, api.AddMachinesRequest{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := h.admin.FollowEvents(ctx, "default", api.FollowOptions{})
	if err != nil {
		t.Fatal(err)
	}
	backlog, _ := collect(t, s, 1)
	if backlog[0].Machine != "0" || backlog[0].Kind != "add-machine" {
		t.Errorf("backlog: got %+v", backlog[0])
	}
	h.addMachines(t, api.AddMachinesRequest{Count: 2})
	live, machines := collect(t, s, 2)
	if live[0].Machine != "1" || live[1].Machine != "2" || live[0].Seq <= backlog[0].Seq || live[1].Seq <= live[0].Seq {
		t.Errorf("live: got %+v", live)
	}
	// The machines message may come before or after the events: read on
	// until both new machines were named.
	named := map[string]bool{}
	for _, id := range machines {
		named[id] = true
	}
	for deadline := time.After(10 * time.Second); !named["1"] || !named["2"]; {
		select {
		case msg := <-s.C():
			for _, id := range msg.Machines {
				named[id] = true
			}
		case <-deadline:
			t.Fatalf("machines messages named %v, want 1 and 2", named)
		}
	}
	cancel()
	for range s.C() {
	}
	if err := s.Err(); err != nil {
		t.Errorf("after cancel: got err %v, want nil", err)
	}

	// Resume after the first live event: Last-Event-ID.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	s2, err := h.admin.FollowEvents(ctx2, "default", api.FollowOptions{After: live[0].Seq})
	if err != nil {
		t.Fatal(err)
	}
	h.addMachines(t, api.AddMachinesRequest{})
	resumed, _ := collect(t, s2, 2)
	if got, want := seqsOf(resumed)[0], live[1].Seq; got != want {
		t.Errorf("resumed: first seq got %d, want %d", got, want)
	}
	if resumed[1].Machine != "3" {
		t.Errorf("resumed: got %+v, want machine 3's event", resumed[1])
	}
}

func TestEventStreamMachineFilter(t *testing.T) {
	h := newHarness(t)
	h.addMachines(t, api.AddMachinesRequest{Count: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := h.admin.FollowEvents(ctx, "default", api.FollowOptions{Machine: "1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.admin.RemoveMachines(ctx, "default", api.RemoveMachinesRequest{IDs: []string{"0"}}); err != nil {
		t.Fatal(err)
	}
	if err := h.admin.RemoveMachines(ctx, "default", api.RemoveMachinesRequest{IDs: []string{"1"}}); err != nil {
		t.Fatal(err)
	}
	es, machines := collect(t, s, 2)
	for _, e := range es {
		if e.Machine != "1" {
			t.Errorf("got an event of machine %s on a stream for machine 1", e.Machine)
		}
	}
	if es[1].Kind != "remove-machine" {
		t.Errorf("got %+v, want remove-machine", es[1])
	}
	for _, id := range machines {
		if id != "1" {
			t.Errorf("got machines message naming %s on a stream for machine 1", id)
		}
	}
}

func TestEventStreamErrors(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	_, err := h.anon.FollowEvents(ctx, "default", api.FollowOptions{})
	wantCode(t, err, muster.EUnauthorized)
	_, err = h.admin.FollowEvents(ctx, "nope", api.FollowOptions{})
	wantCode(t, err, muster.ENotFound)
	_, err = h.admin.FollowEvents(ctx, "default", api.FollowOptions{Machine: "x"})
	wantCode(t, err, muster.EInvalid)
}

func TestNoMetricsWithoutGatherer(t *testing.T) {
	h := newHarness(t)
	status, code := h.raw(t, "GET", "/metrics", "", nil)
	if status != 404 || code != muster.ENotFound {
		t.Errorf("got %d %q, want 404 not-found", status, code)
	}
}

// TestEventStreamReconnect: with Reconnect, a dropped connection is
// resumed after the last event received, without repeats or gaps.
func TestEventStreamReconnect(t *testing.T) {
	h := newHarness(t)
	h.addMachines(t, api.AddMachinesRequest{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := h.admin.FollowEvents(ctx, "default", api.FollowOptions{Reconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := collect(t, s, 1)
	h.ts.CloseClientConnections()
	h.addMachines(t, api.AddMachinesRequest{Count: 2})
	rest, _ := collect(t, s, 2)
	got := append(seqsOf(first), seqsOf(rest)...)
	for i := 1; i < len(got); i++ {
		if got[i] <= got[i-1] {
			t.Fatalf("got seqs %v, want increasing without repeats", got)
		}
	}
	if rest[0].Machine != "1" || rest[1].Machine != "2" {
		t.Errorf("got %+v, want machines 1 and 2", rest)
	}
}
