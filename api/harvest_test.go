package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// harvestRuntime adds the harvest endpoints' runtime to testRuntime.
type harvestRuntime struct {
	*testRuntime
	plan     api.HarvestPlan
	restored []string
}

func (r *harvestRuntime) HarvestPlan(context.Context, string) (api.HarvestPlan, error) {
	return r.plan, nil
}

func (r *harvestRuntime) RestoreInstance(_ context.Context, _, id string) error {
	if id != "i-q" {
		return muster.Errorf(muster.EConflict, "instance %s is not quarantined", id)
	}
	r.restored = append(r.restored, id)
	return nil
}

func TestHarvestPlanRestoreAndStatus(t *testing.T) {
	rt := &harvestRuntime{testRuntime: &testRuntime{}, plan: api.HarvestPlan{
		Quarantined: []api.PlannedHarvest{{Instance: "i-q", Zone: "a", Action: "terminate", Since: start, At: start.Add(time.Minute)}},
		Breaker:     "harvest breaker: 6 of 10 live instances are unknown",
	}}
	h := newHarness(t, func(c *api.Config) { c.Runtime = rt })
	ctx := context.Background()
	var raw map[string]any
	if err := h.admin.Do(ctx, "GET", "/v1/models/default/harvest", nil, &raw); err != nil {
		t.Fatal(err)
	}
	if next, ok := raw["next"].([]any); !ok || len(next) != 0 {
		t.Errorf("plan next = %#v, want [] (never null)", raw["next"])
	}
	plan, err := h.admin.HarvestPlan(ctx, "default")
	if err != nil || len(plan.Quarantined) != 1 || !plan.Quarantined[0].At.Equal(start.Add(time.Minute)) {
		t.Fatalf("plan %+v, %v", plan, err)
	}
	var buf bytes.Buffer
	if err := plan.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"BREAKER: harvest breaker: 6 of 10", "i-q", "terminated at 2025-06-01T12:01:00Z"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("plan text %q lacks %q", buf.String(), want)
		}
	}
	st, err := h.admin.Status(ctx, "default")
	if err != nil || st.HarvestBreaker != rt.plan.Breaker {
		t.Errorf("status harvest-breaker %q (%v), want %q", st.HarvestBreaker, err, rt.plan.Breaker)
	}
	for _, bad := range []string{"", "i-\x1b[2J", "i q"} {
		wantCode(t, h.admin.RestoreInstance(ctx, "default", bad), muster.EInvalid)
	}
	wantCode(t, h.admin.RestoreInstance(ctx, "default", "i-other"), muster.EConflict)
	if err := h.admin.RestoreInstance(ctx, "default", "i-q"); err != nil {
		t.Fatal(err)
	}
	if len(rt.restored) != 1 || rt.restored[0] != "i-q" {
		t.Errorf("restored %v, want [i-q]", rt.restored)
	}
	wantCode(t, h.admin.RestoreInstance(ctx, "nope", "i-q"), muster.ENotFound)
}

func TestHarvestWithoutRuntime(t *testing.T) {
	h := newHarness(t, withRuntime(&testRuntime{}))
	_, err := h.admin.HarvestPlan(context.Background(), "default")
	wantCode(t, err, muster.EUnavailable)
}

func decisionEvent(t *testing.T, model, machine string, d muster.AttemptDecision) muster.Event {
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return muster.Event{ModelUUID: model, MachineID: machine, Actor: "provisioner", Kind: muster.EventDecision, Message: string(b)}
}

// TestExplain: explain is built from the machine's decision events only
// (so it outlives a restart), in order, with a bad event reported rather
// than fatal, and every list [] in JSON.
func TestExplain(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	ids := h.addMachines(t, api.AddMachinesRequest{Count: 2})
	until := start.Add(3 * time.Minute)
	evs := []muster.Event{
		decisionEvent(t, h.model.UUID, ids[0], muster.AttemptDecision{Attempt: 1, Time: start, Shape: "arch=amd64 cores=2",
			Candidates: []muster.ZoneCount{{Zone: "a", Machines: 0}, {Zone: "b", Machines: 1}}, Zone: "a",
			Error: "no capacity in zone a", ErrorKind: "capacity", Next: "retrying in another zone in 10s", NextRetry: start.Add(10 * time.Second)}),
		decisionEvent(t, h.model.UUID, ids[1], muster.AttemptDecision{Attempt: 1, Zone: "c"}), // another machine's
		{ModelUUID: h.model.UUID, MachineID: ids[0], Actor: "provisioner", Kind: "retry", Message: "not a decision"},
		{ModelUUID: h.model.UUID, MachineID: ids[0], Actor: "provisioner", Kind: "replace", Message: "replacing instance i-0: unhealthy"},
		{ModelUUID: h.model.UUID, MachineID: ids[0], Actor: "provisioner", Kind: muster.EventDecision, Message: "{bad"},
		decisionEvent(t, h.model.UUID, ids[0], muster.AttemptDecision{Attempt: 2, Time: start.Add(10 * time.Second), Shape: "arch=amd64 cores=2",
			Candidates: []muster.ZoneCount{{Zone: "b", Machines: 1}}, Failed: []string{"a"}, Excluded: []string{"c"},
			Blocked: []muster.ZoneBlock{{Zone: "d", Until: until}}, Zone: "b", Instance: "i-1\x1b[2J"}),
	}
	if err := h.store.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	e, err := h.admin.Explain(ctx, "default", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Replacements) != 1 || e.Replacements[0].Kind != "replace" || e.Replacements[0].Message != "replacing instance i-0: unhealthy" {
		t.Fatalf("replacements %+v, want the one replace event", e.Replacements)
	}
	if len(e.Attempts) != 3 || e.Attempts[0].Zone != "a" || !strings.Contains(e.Attempts[1].Error, "undecodable") || e.Attempts[2].Zone != "b" {
		t.Fatalf("attempts %+v, want a, an undecodable one, b", e.Attempts)
	}
	var buf bytes.Buffer
	if err := e.Write(&buf, "text"); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{"chose zone a", "error (capacity): no capacity in zone a", "next: retrying in another zone in 10s (at 2025-06-01T12:00:10Z)",
		"failed before: a; excluded: c; out of capacity (remembered): d until 2025-06-01T12:03:00Z", "chose zone b", `started instance i-1\x1b[2J`, "replace at ", "replacing instance i-0: unhealthy"} {
		if !strings.Contains(text, want) {
			t.Errorf("explain text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "\x1b") {
		t.Errorf("explain text holds a raw escape (S8):\n%q", text)
	}
	buf.Reset()
	if err := e.Write(&buf, "json"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "null") {
		t.Errorf("explain JSON has a null list:\n%s", buf.String())
	}
	_, err = h.admin.Explain(ctx, "default", "99")
	wantCode(t, err, muster.ENotFound)
	_, err = h.admin.Explain(ctx, "default", "x")
	wantCode(t, err, muster.EInvalid)
}

// FuzzExplain: any decision event text makes an explanation whose text has
// no raw control characters, and never a panic.
func FuzzExplain(f *testing.F) {
	f.Add(`{"attempt":1,"zone":"a","error":"boom\u001b[2J","error-kind":"capacity"}`)
	f.Add(`{bad`)
	f.Add(`{"candidates":[{"zone":"\u0007","machines":-1}],"blocked":null}`)
	f.Fuzz(func(t *testing.T, msg string) {
		e := api.ExplainEvents(muster.Machine{ID: "0"}, []muster.Event{{Kind: muster.EventDecision, Message: msg}})
		if len(e.Attempts) != 1 {
			t.Fatalf("%d attempts, want 1", len(e.Attempts))
		}
		var buf bytes.Buffer
		if err := e.WriteText(&buf); err != nil {
			t.Fatal(err)
		}
		for _, r := range buf.String() {
			if r != '\n' && (r < ' ' || r == 0x7f) {
				t.Fatalf("raw control character %q in %q", r, buf.String())
			}
		}
	})
}
