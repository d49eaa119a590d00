package storetest

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
)

func testEvents(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	other := newModel(t, s, "other")
	at := time.Date(2025, 5, 6, 7, 8, 9, 0, time.UTC)
	es := []muster.Event{
		{ModelUUID: m.UUID, Actor: "admin", Kind: "add-machine", MachineID: "0", Message: "added"},
		{ModelUUID: m.UUID, Actor: "provisioner", Kind: "start", MachineID: "1", Time: at},
		{ModelUUID: other.UUID, Actor: "admin", Kind: "add-machine", MachineID: "0"},
		{ModelUUID: m.UUID, Actor: "provisioner", Kind: "started", MachineID: "0"},
		{ModelUUID: m.UUID, Actor: "provisioner", Kind: "harvest"},
	}
	if err := s.AppendEvents(ctx, es); err != nil {
		t.Fatalf("append events: %v", err)
	}
	all, err := s.Events(ctx, m.UUID, muster.EventFilter{})
	if err != nil {
		t.Fatalf("events: %v", err)
	}
	if len(all) != 4 {
		t.Fatalf("events: got %d, want 4", len(all))
	}
	var kinds []string
	for i, e := range all {
		kinds = append(kinds, e.Kind)
		if e.ModelUUID != m.UUID || e.Time.IsZero() {
			t.Fatalf("event %d: got %+v, want model %s and a time", i, e, m.UUID)
		}
		if i > 0 && e.Seq <= all[i-1].Seq {
			t.Fatalf("events out of order: seq %d after %d", e.Seq, all[i-1].Seq)
		}
	}
	if want := []string{"add-machine", "start", "started", "harvest"}; !reflect.DeepEqual(kinds, want) {
		t.Fatalf("event kinds: got %v, want %v", kinds, want)
	}
	if all[0].Actor != "admin" || all[0].MachineID != "0" || all[0].Message != "added" {
		t.Fatalf("first event: got %+v", all[0])
	}
	if !all[1].Time.Equal(at) {
		t.Fatalf("given time: got %v, want %v", all[1].Time, at)
	}
	for _, tc := range []struct {
		name string
		f    muster.EventFilter
		want []string
	}{
		{"machine", muster.EventFilter{MachineID: "0"}, []string{"add-machine", "started"}},
		{"after", muster.EventFilter{AfterSeq: all[1].Seq}, []string{"started", "harvest"}},
		{"limit keeps the newest", muster.EventFilter{Limit: 3}, []string{"start", "started", "harvest"}},
		{"limit larger than log", muster.EventFilter{Limit: 10}, kinds},
		{"machine and limit", muster.EventFilter{MachineID: "0", Limit: 1}, []string{"started"}},
		{"after the last", muster.EventFilter{AfterSeq: all[3].Seq}, nil},
		{"page keeps the oldest", muster.EventFilter{Page: 2}, kinds[:2]},
		{"page after", muster.EventFilter{AfterSeq: all[1].Seq, Page: 1}, []string{"started"}},
		{"machine page", muster.EventFilter{MachineID: "0", Page: 1}, []string{"add-machine"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es, err := s.Events(ctx, m.UUID, tc.f)
			if err != nil {
				t.Fatalf("events: %v", err)
			}
			var got []string
			for _, e := range es {
				got = append(got, e.Kind)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("events %+v: got %v, want %v", tc.f, got, tc.want)
			}
		})
	}
	_, err = s.Events(ctx, m.UUID, muster.EventFilter{Page: 2, Limit: 2})
	wantCode(t, "page with limit", err, muster.EInvalid)
	_, err = s.Events(ctx, m.UUID, muster.EventFilter{Limit: -1})
	wantCode(t, "negative limit", err, muster.EInvalid)
	_, err = s.Events(ctx, "00000000-0000-4000-8000-000000000000", muster.EventFilter{})
	wantCode(t, "events of unknown model", err, muster.ENotFound)
	// A batch with a bad event appends nothing.
	err = s.AppendEvents(ctx, []muster.Event{{ModelUUID: m.UUID, Kind: "ok"}, {ModelUUID: "00000000-0000-4000-8000-000000000000", Kind: "x"}})
	wantCode(t, "event of unknown model", err, muster.ENotFound)
	err = s.AppendEvents(ctx, []muster.Event{{ModelUUID: m.UUID, Kind: "ok"}, {Kind: "x"}})
	wantCode(t, "event without model", err, muster.EInvalid)
	if es, _ := s.Events(ctx, m.UUID, muster.EventFilter{}); len(es) != 4 {
		t.Fatalf("events after refused appends: got %d, want 4", len(es))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = h.store(t)
	again, err := s.Events(ctx, m.UUID, muster.EventFilter{})
	if err != nil || len(again) != 4 || again[3].Seq != all[3].Seq {
		t.Fatalf("events after reopen: got %+v (err %v), want the same 4", again, err)
	}
	if err := s.AppendEvents(ctx, []muster.Event{{ModelUUID: m.UUID, Kind: "later"}}); err != nil {
		t.Fatal(err)
	}
	if es, _ := s.Events(ctx, m.UUID, muster.EventFilter{AfterSeq: all[3].Seq}); len(es) != 1 || es[0].Seq <= all[3].Seq {
		t.Fatalf("event after reopen: got %+v, want one with a larger seq", es)
	}
}

func testControllerConfig(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	got, err := s.ControllerConfig(ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("empty controller config: got %v (err %v)", got, err)
	}
	got, err = s.InitControllerConfig(ctx, map[string]string{"uuid": "first", "ca": "pem1"})
	if err != nil {
		t.Fatalf("init: %v", err)
	}
	if want := map[string]string{"uuid": "first", "ca": "pem1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("init: got %v, want %v", got, want)
	}
	got, err = s.InitControllerConfig(ctx, map[string]string{"uuid": "second", "token": "hash"})
	if err != nil {
		t.Fatalf("second init: %v", err)
	}
	want := map[string]string{"uuid": "first", "ca": "pem1", "token": "hash"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("second init: got %v, want %v (the first values win)", got, want)
	}
	if err := s.SetControllerConfig(ctx, "ca", "pem2"); err != nil {
		t.Fatalf("set: %v", err)
	}
	want["ca"] = "pem2"
	wantCode(t, "empty key", s.SetControllerConfig(ctx, "", "v"), muster.EInvalid)
	_, err = s.InitControllerConfig(ctx, map[string]string{"": "v"})
	wantCode(t, "init empty key", err, muster.EInvalid)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = h.store(t)
	if got, err := s.ControllerConfig(ctx); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("controller config after reopen: got %v (err %v), want %v", got, err, want)
	}
}

// testEventsFollow: a reader that follows the log with AfterSeq while
// several writers append sees every event: sequence numbers are assigned
// in commit order.
func testEventsFollow(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	writers, appendsEach := 4, 100
	if testing.Short() || raceEnabled {
		appendsEach = 25
	}
	var wg sync.WaitGroup
	for g := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range appendsEach {
				e := muster.Event{ModelUUID: m.UUID, Actor: "writer/" + idOf(g), Kind: "tick", Message: idOf(i)}
				if err := s.AppendEvents(ctx, []muster.Event{e}); err != nil {
					t.Errorf("append event: %v", err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	seen := map[int64]bool{}
	var after int64
	follow := func() {
		es, err := s.Events(ctx, m.UUID, muster.EventFilter{AfterSeq: after})
		if err != nil {
			t.Fatalf("events after %d: %v", after, err)
		}
		for _, e := range es {
			if seen[e.Seq] || e.Seq <= after {
				t.Fatalf("event seq %d after %d: seen before or out of order", e.Seq, after)
			}
			seen[e.Seq] = true
			after = e.Seq
		}
	}
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		follow()
	}
	follow()
	if got, want := len(seen), writers*appendsEach; got != want {
		t.Fatalf("follower saw %d events, want %d: an event committed behind the follower's position", got, want)
	}
}

// testEventsSeqs: the events of one append, however many, get the seqs
// they are read back with, in order, message by message.
func testEventsSeqs(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	for _, n := range []int{1, 3, 100} {
		es := make([]muster.Event, n)
		for i := range es {
			es[i] = muster.Event{ModelUUID: m.UUID, Actor: "test", Kind: "k", Message: fmt.Sprintf("batch %d event %d", n, i)}
		}
		if err := s.AppendEvents(ctx, es); err != nil {
			t.Fatalf("append %d events: %v", n, err)
		}
		got, err := s.Events(ctx, m.UUID, muster.EventFilter{AfterSeq: es[0].Seq - 1})
		if err != nil || len(got) != n {
			t.Fatalf("read back %d events: %d, %v", n, len(got), err)
		}
		for i := range es {
			if es[i].Seq != got[i].Seq || es[i].Message != got[i].Message {
				t.Fatalf("event %d of %d: appended as seq %d (%q), read back as seq %d (%q)", i, n, es[i].Seq, es[i].Message, got[i].Seq, got[i].Message)
			}
		}
	}
}
