package api_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

func TestAuthRefused(t *testing.T) {
	h := newHarness(t)
	h.addMachines(t, api.AddMachinesRequest{})
	pw, nonce := h.provision(t, "0", "a")
	login, err := h.anon.Login(context.Background(), api.LoginRequest{Model: "default", Machine: "0", Password: pw, Nonce: nonce})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		method     string
		path       string
		token      string
		wantStatus int
		wantCode   string
	}{
		{"no token", "GET", "/v1/models", "", 401, muster.EUnauthorized},
		{"wrong token", "GET", "/v1/models", muster.NewSecret(), 401, muster.EUnauthorized},
		{"agent token on admin route", "GET", "/v1/models/default/status", login.Token, 403, muster.EForbidden},
		{"admin token on agent route", "GET", "/v1/agent/models/default/machines/0", h.token, 403, muster.EForbidden},
		{"no token on agent route", "GET", "/v1/agent/models/default/machines/0", "", 401, muster.EUnauthorized},
		{"no token on unknown route", "GET", "/v1/nothing", "", 404, muster.ENotFound},
		{"admin ok", "GET", "/v1/models", h.token, 200, ""},
		{"agent ok", "GET", "/v1/agent/models/default/machines/0", login.Token, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, code := h.raw(t, tc.method, tc.path, tc.token, nil)
			if status != tc.wantStatus || code != tc.wantCode {
				t.Errorf("got %d %q, want %d %q", status, code, tc.wantStatus, tc.wantCode)
			}
		})
	}
}

// TestErrorCodes checks that every code reaches the client with its code
// and that each travels with the status of SPEC §5.3.
func TestErrorCodes(t *testing.T) {
	zonesErr := errors.New("cloud down")
	h := newHarness(t, withRuntime(&testRuntime{zones: func(ctx context.Context, model string) ([]api.ZoneInfo, error) { return nil, zonesErr }}))
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 2})
	pw, _ := h.provision(t, "0", "a")
	agentPW, agentNonce := h.provision(t, "1", "b")
	login, err := h.anon.Login(ctx, api.LoginRequest{Model: "default", Machine: "1", Password: agentPW, Nonce: agentNonce})
	if err != nil {
		t.Fatal(err)
	}
	agent := h.admin.WithToken(login.Token)
	for _, tc := range []struct {
		name       string
		call       func() error
		wantCode   string
		wantStatus int
	}{
		{"invalid", func() error {
			_, err := h.admin.AddMachines(ctx, "default", api.AddMachinesRequest{Constraints: "cores=lots"})
			return err
		}, muster.EInvalid, 400},
		{"unauthorized", func() error { _, err := h.anon.Models(ctx); return err }, muster.EUnauthorized, 401},
		{"not-provisioned", func() error {
			_, err := h.anon.Login(ctx, api.LoginRequest{Model: "default", Machine: "0", Password: pw, Nonce: "machine-0:wrong"})
			return err
		}, muster.ENotProvisioned, 401},
		{"forbidden", func() error { _, err := agent.AgentMachine(ctx, "default", "0"); return err }, muster.EForbidden, 403},
		{"not-found", func() error { _, err := h.admin.Status(ctx, "nope"); return err }, muster.ENotFound, 404},
		{"conflict", func() error {
			_, err := h.admin.AddModel(ctx, api.AddModelRequest{Name: "default", Provider: "sim"})
			return err
		}, muster.EConflict, 409},
		{"unavailable", func() error { _, err := h.admin.Zones(ctx, "default"); return err }, muster.EUnavailable, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			wantCode(t, err, tc.wantCode)
			if got := api.StatusOf(tc.wantCode); got != tc.wantStatus {
				t.Errorf("got status %d, want %d", got, tc.wantStatus)
			}
		})
	}
	if got, want := api.StatusOf(muster.EInternal), 500; got != want {
		t.Errorf("internal: got status %d, want %d", got, want)
	}
}

func TestAddMachinesBadInputChangesNothing(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		req  api.AddMachinesRequest
	}{
		{"bad constraint value", api.AddMachinesRequest{Count: 3, Constraints: "mem=lots"}},
		{"unknown constraint", api.AddMachinesRequest{Constraints: "colour=red"}},
		{"bad storage", api.AddMachinesRequest{Storage: []string{"data"}}},
		{"bad base", api.AddMachinesRequest{Base: "ubuntu"}},
		{"bad placement", api.AddMachinesRequest{Placement: "rack=1"}},
		{"bad group", api.AddMachinesRequest{Group: "a b"}},
		{"negative count", api.AddMachinesRequest{Count: -1}},
		{"huge count", api.AddMachinesRequest{Count: api.MaxAddMachines + 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.admin.AddMachines(ctx, "default", tc.req)
			wantCode(t, err, muster.EInvalid)
			if got := len(h.machines(t)); got != 0 {
				t.Errorf("got %d machines, want 0", got)
			}
		})
	}
	_, err := h.admin.AddMachines(ctx, "nope", api.AddMachinesRequest{})
	wantCode(t, err, muster.ENotFound)
}

func TestAddMachines(t *testing.T) {
	h := newHarness(t)
	ids := h.addMachines(t, api.AddMachinesRequest{Count: 3, Constraints: "cores=2 mem=4G", Group: "web", Placement: "zone=b", Storage: []string{"data=10G,pool=ssd"}})
	if want := []string{"0", "1", "2"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("got ids %v, want %v", ids, want)
	}
	m := h.machine(t, "2")
	if got, want := m.Constraints.String(), "cores=2 mem=4G"; got != want {
		t.Errorf("got constraints %q, want %q", got, want)
	}
	if m.Group != "web" || m.Placement != "zone=b" || m.Base != muster.DefaultBase || len(m.Storage) != 1 || m.Storage[0].Pool != "ssd" {
		t.Errorf("got machine %+v", m)
	}
	es, err := h.admin.Events(context.Background(), "default", api.EventQuery{Machine: "2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Kind != "add-machine" || es[0].Actor != "admin" {
		t.Errorf("got events %+v, want one add-machine by admin", es)
	}
}

func TestRemoveMachines(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 4})

	err := h.admin.RemoveMachines(ctx, "default", api.RemoveMachinesRequest{IDs: []string{"0", "9"}})
	wantCode(t, err, muster.ENotFound)
	if !strings.Contains(err.Error(), "9") {
		t.Errorf("got %q, want it to name machine 9", err)
	}
	for _, m := range h.machines(t) {
		if m.Life != muster.LifeAlive {
			t.Errorf("machine %s: got life %s after a refused remove, want alive", m.ID, m.Life)
		}
	}
	wantCode(t, h.admin.RemoveMachines(ctx, "default", api.RemoveMachinesRequest{}), muster.EInvalid)
	wantCode(t, h.admin.RemoveMachines(ctx, "default", api.RemoveMachinesRequest{IDs: []string{"x"}}), muster.EInvalid)

	if err := h.admin.RemoveMachines(ctx, "default", api.RemoveMachinesRequest{IDs: []string{"0", "0"}}); err != nil {
		t.Fatal(err)
	}
	if err := h.admin.RemoveMachines(ctx, "default", api.RemoveMachinesRequest{IDs: []string{"1"}, Force: true, KeepInstance: true}); err != nil {
		t.Fatal(err)
	}
	// Forcing a dying machine makes it dead; removing a dead one again is fine.
	if err := h.admin.RemoveMachines(ctx, "default", api.RemoveMachinesRequest{IDs: []string{"0", "1"}, Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := h.admin.RemoveMachines(ctx, "default", api.RemoveMachinesRequest{IDs: []string{"2"}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   string
		life muster.Life
		keep bool
	}{{"0", muster.LifeDead, false}, {"1", muster.LifeDead, true}, {"2", muster.LifeDying, false}, {"3", muster.LifeAlive, false}} {
		m := h.machine(t, tc.id)
		if m.Life != tc.life || m.KeepInstance != tc.keep {
			t.Errorf("machine %s: got %s keep=%v, want %s keep=%v", tc.id, m.Life, m.KeepInstance, tc.life, tc.keep)
		}
	}
}

func TestRetryProvisioning(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 3})
	err := h.store.UpdateMachines(ctx, h.model.UUID, []muster.MachineUpdate{
		{ID: "0", InstanceStatus: muster.Ptr(muster.InstanceProvisioningError), InstanceMessage: muster.Ptr("no capacity"), AutoRetries: muster.Ptr(4), Status: muster.Ptr(muster.StatusError)},
		{ID: "2", InstanceStatus: muster.Ptr(muster.InstanceProvisioningError), InstanceMessage: muster.Ptr("bad image")},
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.admin.RetryProvisioning(ctx, "default", api.RetryProvisioningRequest{IDs: []string{"0", "1"}})
	wantCode(t, err, muster.EInvalid)
	if got := h.machine(t, "0").InstanceStatus; got != muster.InstanceProvisioningError {
		t.Errorf("machine 0 after refused retry: got %q, want %q", got, muster.InstanceProvisioningError)
	}
	_, err = h.admin.RetryProvisioning(ctx, "default", api.RetryProvisioningRequest{})
	wantCode(t, err, muster.EInvalid)
	_, err = h.admin.RetryProvisioning(ctx, "default", api.RetryProvisioningRequest{IDs: []string{"7"}})
	wantCode(t, err, muster.ENotFound)

	ids, err := h.admin.RetryProvisioning(ctx, "default", api.RetryProvisioningRequest{IDs: []string{"0"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"0"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("got %v, want %v", ids, want)
	}
	m := h.machine(t, "0")
	if m.Status != muster.StatusPending || m.InstanceStatus != muster.InstanceAllocating || m.InstanceMessage != api.RetryMessage || m.AutoRetries != 0 {
		t.Errorf("got %s/%s/%q/%d, want pending/allocating/%q/0", m.Status, m.InstanceStatus, m.InstanceMessage, m.AutoRetries, api.RetryMessage)
	}
	ids, err = h.admin.RetryProvisioning(ctx, "default", api.RetryProvisioningRequest{All: true})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"2"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("all: got %v, want %v", ids, want)
	}
}

// statusKeys and machineKeys are the keys of SPEC §5.2's status JSON.
var (
	statusKeys  = []string{"model", "provider", "harvest-mode", "machines", "zones", "provisioner-error", "harvest-breaker"}
	machineKeys = []string{"life", "status", "status-message", "instance-id", "instance-status", "instance-message",
		"zone", "group", "base", "constraints", "hardware", "addresses", "keep-instance"}
)

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	sort.Strings(s)
	return s
}

func TestStatusJSONHasEveryKey(t *testing.T) {
	h := newHarness(t, withRuntime(&testRuntime{
		zones: func(ctx context.Context, model string) ([]api.ZoneInfo, error) {
			return []api.ZoneInfo{{Name: "a", Available: true}, {Name: "b", Available: true, Machines: 1}, {Name: "c"}}, nil
		},
		provisionerError: func(string) string { return "list instances: boom" },
	}))
	h.addMachines(t, api.AddMachinesRequest{Count: 2})
	h.provision(t, "1", "b")
	var raw map[string]any
	if err := h.admin.Do(context.Background(), "GET", "/v1/models/default/status", nil, &raw); err != nil {
		t.Fatal(err)
	}
	if got, want := keysOf(raw), sorted(statusKeys); !reflect.DeepEqual(got, want) {
		t.Errorf("top-level keys: got %v, want %v", got, want)
	}
	machines := raw["machines"].(map[string]any)
	bare := machines["0"].(map[string]any)
	if got, want := keysOf(bare), sorted(machineKeys); !reflect.DeepEqual(got, want) {
		t.Errorf("machine keys: got %v, want %v", got, want)
	}
	if addrs, ok := bare["addresses"].([]any); !ok || len(addrs) != 0 {
		t.Errorf("addresses of a bare machine: got %#v, want []", bare["addresses"])
	}
	for _, k := range []string{"status-message", "instance-id", "instance-message", "zone", "group", "constraints", "hardware"} {
		if bare[k] != "" {
			t.Errorf("%s of a bare machine: got %#v, want \"\"", k, bare[k])
		}
	}

	st, err := h.admin.Status(context.Background(), "default")
	if err != nil {
		t.Fatal(err)
	}
	if st.Model != "default" || st.Provider != "sim" || st.HarvestMode != "destroyed" || st.ProvisionerError != "list instances: boom" {
		t.Errorf("got %+v", st)
	}
	if got := st.Machines["1"]; got.InstanceID != "i-1" || got.Zone != "b" || got.InstanceStatus != "running" || got.Hardware != "arch=amd64 availability-zone=b" {
		t.Errorf("machine 1: got %+v", got)
	}
	wantZones := map[string]api.ZoneStatus{"a": {Available: true}, "b": {Available: true, Machines: 1}, "c": {}}
	if !reflect.DeepEqual(st.Zones, wantZones) {
		t.Errorf("zones: got %v, want %v", st.Zones, wantZones)
	}
	zs, err := h.admin.Zones(context.Background(), "default")
	if err != nil {
		t.Fatal(err)
	}
	if len(zs) != 3 || !reflect.DeepEqual(zs[1], api.ZoneInfo{Name: "b", Available: true, Machines: 1}) {
		t.Errorf("zones: got %+v", zs)
	}
}

func TestModels(t *testing.T) {
	validated := 0
	h := newHarness(t, withRuntime(&testRuntime{validateModel: func(m muster.Model) error {
		validated++
		if m.Provider != "sim" {
			return fmt.Errorf("unknown provider %q", m.Provider)
		}
		return nil
	}}))
	ctx := context.Background()
	mi, err := h.admin.AddModel(ctx, api.AddModelRequest{Name: "other", Provider: "sim",
		Config: map[string]string{"endpoint": "http://127.0.0.1:1", "harvest-mode": "all", "retry-count": "2"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mi.Config, map[string]string{"endpoint": "http://127.0.0.1:1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("config: got %v, want %v", got, want)
	}
	if mi.Settings["harvest-mode"] != "all" || mi.Settings["retry-count"] != "2" || mi.Settings["retry-delay"] != "10s" {
		t.Errorf("settings: got %v", mi.Settings)
	}
	for _, tc := range []struct {
		name string
		req  api.AddModelRequest
		code string
	}{
		{"provider refused", api.AddModelRequest{Name: "x", Provider: "ec9"}, muster.EInvalid},
		{"bad setting", api.AddModelRequest{Name: "x", Provider: "sim", Config: map[string]string{"retry-count": "-1"}}, muster.EInvalid},
		{"bad name", api.AddModelRequest{Name: "a b", Provider: "sim"}, muster.EInvalid},
		{"no provider", api.AddModelRequest{Name: "x"}, muster.EInvalid},
		{"taken", api.AddModelRequest{Name: "other", Provider: "sim"}, muster.EConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.admin.AddModel(ctx, tc.req)
			wantCode(t, err, tc.code)
		})
	}
	ms, err := h.admin.Models(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("got %d models, want 2", len(ms))
	}
	if _, err := h.admin.AddMachines(ctx, "other", api.AddMachinesRequest{}); err != nil {
		t.Fatal(err)
	}
	wantCode(t, h.admin.RemoveModel(ctx, "other"), muster.EConflict)
	if err := h.admin.RemoveModel(ctx, "default"); err != nil {
		t.Fatal(err)
	}
	_, err = h.admin.Model(ctx, "default")
	wantCode(t, err, muster.ENotFound)
	wantCode(t, h.admin.RemoveModel(ctx, "default"), muster.ENotFound)
}

func TestModelConfig(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	cfg, err := h.admin.ModelConfig(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := cfg, muster.DefaultSettings().Map(); !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name    string
		set     map[string]string
		mention string
	}{
		{"unknown key", map[string]string{"retry-count": "3", "colour": "red"}, "colour"},
		{"bad value", map[string]string{"retry-count": "3", "agent-heartbeat": "soon"}, "agent-heartbeat"},
		{"nothing", map[string]string{}, "no settings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.admin.SetModelConfig(ctx, "default", tc.set)
			wantCode(t, err, muster.EInvalid)
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("got %q, want it to mention %q", err, tc.mention)
			}
			m, _ := h.store.Model(ctx, "default")
			if m.Settings != muster.DefaultSettings() {
				t.Errorf("settings changed by a refused request: %v", m.Settings.Map())
			}
		})
	}
	got, err := h.admin.SetModelConfig(ctx, "default", map[string]string{"retry-count": "3", "harvest-mode": "none"})
	if err != nil {
		t.Fatal(err)
	}
	if got["retry-count"] != "3" || got["harvest-mode"] != "none" {
		t.Errorf("got %v", got)
	}
	m, _ := h.store.Model(ctx, "default")
	if m.Settings.RetryCount != 3 || m.Settings.HarvestMode != muster.HarvestNone {
		t.Errorf("store: got %+v", m.Settings)
	}
}

func TestRequestDecoding(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name       string
		body       string
		wantStatus int
	}{
		{"unknown field", `{"count":1,"colour":"red"}`, 400},
		{"trailing data", `{"count":1}{"count":2}`, 400},
		{"trailing garbage", `{"count":1} x`, 400},
		{"wrong type", `{"count":"one"}`, 400},
		{"not json", `count=1`, 400},
		{"empty", ``, 400},
		{"oversized", `{"constraints":"` + strings.Repeat("a", api.MaxBodyBytes) + `"}`, 413},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, code := h.raw(t, "POST", "/v1/models/default/machines", h.token, []byte(tc.body))
			if status != tc.wantStatus || code != muster.EInvalid {
				t.Errorf("got %d %q, want %d %q", status, code, tc.wantStatus, muster.EInvalid)
			}
			if got := len(h.machines(t)); got != 0 {
				t.Errorf("got %d machines, want 0", got)
			}
		})
	}
	status, _ := h.raw(t, "POST", "/v1/models/default/machines", h.token, []byte(`{"count":2}`))
	if status != http.StatusCreated || len(h.machines(t)) != 2 {
		t.Errorf("valid body: got %d and %d machines, want 201 and 2", status, len(h.machines(t)))
	}
}

func TestShowMachineAndEvents(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 2, Storage: []string{"data=10G"}})
	h.provision(t, "1", "c")
	d, err := h.admin.Machine(ctx, "default", "1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Machine.ID != "1" || d.Machine.Instance == nil || d.Machine.Instance.InstanceID != "i-1" || !reflect.DeepEqual(d.Machine.Storage, []string{"data=10G"}) {
		t.Errorf("got %+v", d.Machine)
	}
	if len(d.Events) != 1 || d.Events[0].Machine != "1" {
		t.Errorf("got events %+v, want machine 1's add-machine", d.Events)
	}
	_, err = h.admin.Machine(ctx, "default", "5")
	wantCode(t, err, muster.ENotFound)
	_, err = h.admin.Machine(ctx, "default", "x")
	wantCode(t, err, muster.EInvalid)

	all, err := h.admin.Events(ctx, "default", api.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 2 {
		t.Fatalf("got %d events, want 2", len(all))
	}
	after, err := h.admin.Events(ctx, "default", api.EventQuery{After: all[0].Seq})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != 1 || after[0].Seq != all[1].Seq {
		t.Errorf("after: got %+v, want the second event", after)
	}
	status, code := h.raw(t, "GET", "/v1/models/default/events?limit=-1", h.token, nil)
	if status != 400 || code != muster.EInvalid {
		t.Errorf("bad limit: got %d %q, want 400 invalid", status, code)
	}
}

func TestApply(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	fleet := api.ApplyRequest{Groups: []api.FleetGroup{
		{Name: "web", Count: 3, Constraints: "cores=2"},
		{Name: "db", Count: 1, Storage: []string{"data=10G"}},
	}}
	dry := fleet
	dry.DryRun = true
	res, err := h.admin.Apply(ctx, "default", dry)
	if err != nil {
		t.Fatal(err)
	}
	if !res.DryRun || res.Groups[0].Add != 3 || res.Groups[1].Add != 1 || len(h.machines(t)) != 0 {
		t.Fatalf("dry run: got %+v and %d machines, want a plan of 3+1 and no machines", res, len(h.machines(t)))
	}
	res, err = h.admin.Apply(ctx, "default", fleet)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Groups[0].Added, []string{"0", "1", "2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("web added: got %v, want %v", got, want)
	}
	if got := h.machine(t, "3"); got.Group != "db" || len(got.Storage) != 1 {
		t.Errorf("db machine: got %+v", got)
	}
	// Applying again changes nothing.
	res, err = h.admin.Apply(ctx, "default", fleet)
	if err != nil {
		t.Fatal(err)
	}
	if res.Groups[0].Add != 0 || len(res.Groups[0].Remove) != 0 || len(h.machines(t)) != 4 {
		t.Errorf("second apply: got %+v", res)
	}
	// Shrinking removes the highest ids first.
	fleet.Groups[0].Count = 1
	res, err = h.admin.Apply(ctx, "default", fleet)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Groups[0].Remove, []string{"2", "1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("remove: got %v, want %v", got, want)
	}
	for id, want := range map[string]muster.Life{"0": muster.LifeAlive, "1": muster.LifeDying, "2": muster.LifeDying, "3": muster.LifeAlive} {
		if got := h.machine(t, id).Life; got != want {
			t.Errorf("machine %s: got %s, want %s", id, got, want)
		}
	}
	// A bad group changes nothing.
	bad := api.ApplyRequest{Groups: []api.FleetGroup{{Name: "web", Count: 5}, {Name: "x", Count: 1, Constraints: "mem=big"}}}
	_, err = h.admin.Apply(ctx, "default", bad)
	wantCode(t, err, muster.EInvalid)
	if got := len(h.machines(t)); got != 4 {
		t.Errorf("after a bad apply: got %d machines, want 4", got)
	}
	// The cap is per request (S7): groups each within it, together over it.
	var big api.ApplyRequest
	for _, name := range []string{"g1", "g2", "g3"} {
		big.Groups = append(big.Groups, api.FleetGroup{Name: name, Count: api.MaxAddMachines / 2})
	}
	_, err = h.admin.Apply(ctx, "default", big)
	wantCode(t, err, muster.EInvalid)
	if err == nil || !strings.Contains(err.Error(), "too many machines in one apply") {
		t.Errorf("over-cap apply: got %v, want it to say why", err)
	}
	if got := len(h.machines(t)); got != 4 {
		t.Errorf("after an over-cap apply: got %d machines, want 4", got)
	}
}

func TestSimProxy(t *testing.T) {
	h := newHarness(t, withRuntime(&testRuntime{providerHandler: func(model string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "%s %s auth=%q", model, r.URL.Path, r.Header.Get("Authorization"))
		})
	}}))
	resp, err := h.admin.HTTPClient().Get(h.admin.SimURL("default") + "zones")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got, want := string(b), h.model.UUID+` /zones auth=""`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	resp, err = h.anon.HTTPClient().Get(h.admin.SimURL("default") + "zones")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("without token: got %d, want 401", resp.StatusCode)
	}
}

func TestNoSimHandler(t *testing.T) {
	h := newHarness(t)
	status, code := h.raw(t, "GET", "/v1/models/default/sim/zones", h.token, nil)
	if status != 404 || code != muster.ENotFound {
		t.Errorf("got %d %q, want 404 not-found", status, code)
	}
}

// A handler that panics answers an internal error instead of dropping the
// connection, and the server goes on serving.
func TestHandlerPanicIsAnInternalError(t *testing.T) {
	h := newHarness(t, withRuntime(&testRuntime{zones: func(ctx context.Context, model string) ([]api.ZoneInfo, error) { panic("zones exploded") }}))
	ctx := context.Background()
	_, err := h.admin.Zones(ctx, "default")
	wantCode(t, err, muster.EInternal)
	if _, err := h.admin.Models(ctx); err != nil {
		t.Errorf("after the panic: %v", err)
	}
}
