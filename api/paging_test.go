package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/auth"
)

// get sends an admin GET and returns the status and body.
func (h *harness) get(tb testing.TB, path string) (int, []byte) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, h.ts.URL+path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	auth.SetBearerToken(req, h.token)
	resp, err := h.client(tb, "").HTTPClient().Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestMachineListPaging: pages come in id order, at most limit long,
// resume after the given id and end with an empty next; bad parameters
// are refused with one line naming them.
func TestMachineListPaging(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 25})
	h.provision(t, "12", "b")
	var got []string
	after, pages := "", 0
	for {
		p, err := h.admin.Machines(ctx, "default", after, 10)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(p.Machines) > 10 || pages > 5 {
			t.Fatalf("page %d: %d machines, want at most 10", pages, len(p.Machines))
		}
		for _, m := range p.Machines {
			got = append(got, m.ID)
			if m.ID == "12" && (m.Instance == nil || m.Instance.InstanceID != "i-12") {
				t.Errorf("machine 12 in a page: instance %+v, want i-12", m.Instance)
			}
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	var want []string
	for i := range 25 {
		want = append(want, strconv.Itoa(i))
	}
	if !reflect.DeepEqual(got, want) || pages != 3 {
		t.Fatalf("paged ids in %d pages: %v, want %v in 3", pages, got, want)
	}
	if p, err := h.admin.Machines(ctx, "default", "9", 3); err != nil || len(p.Machines) != 3 || p.Machines[0].ID != "10" || p.Next != "12" {
		t.Fatalf("page after 9 of 3: %+v, %v; want 10, 11, 12 and next 12", p, err)
	}
	if p, err := h.admin.Machines(ctx, "default", "", 0); err != nil || len(p.Machines) != 25 || p.Next != "" {
		t.Fatalf("default page: %d machines, next %q, %v; want all 25 and no next", len(p.Machines), p.Next, err)
	}
	for _, path := range []string{"machines", "status"} {
		for _, q := range []string{"after=x", "after=-1", "after=01", "after=", "limit=0", "limit=abc", "limit=10001", "limit=-5"} {
			st, body := h.get(t, "/v1/models/default/"+path+"?"+q)
			msg := strings.TrimSpace(string(body))
			if st != http.StatusBadRequest || strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "bad ") {
				t.Errorf("%s?%s: %d %s; want 400 with one line naming the parameter", path, q, st, msg)
			}
		}
	}
	if st, body := h.get(t, "/v1/models/default/status?machines=1&limit=5"); st != http.StatusBadRequest {
		t.Errorf("status with machines and limit: %d %s, want 400", st, body)
	}
}

// TestStreamedStatusEqualsBuiltOne: the streamed status of the whole
// model (and the client's pages of it) says what the status built in
// memory for the same machines (?machines=…) says.
func TestStreamedStatusEqualsBuiltOne(t *testing.T) {
	rt := &testRuntime{
		zones: func(context.Context, string) ([]api.ZoneInfo, error) {
			return []api.ZoneInfo{{Name: "a", Available: true, Machines: 2}, {Name: "b", Available: false, Machines: 1}}, nil
		},
		provisionerError: func(string) string { return "zone c is out of capacity" },
	}
	h := newHarness(t, withRuntime(rt))
	ctx := context.Background()
	// More than one chunk of the stream and more than one filtered request.
	ids := h.addMachines(t, api.AddMachinesRequest{Count: 1502})
	h.addMachines(t, api.AddMachinesRequest{Count: 3, Group: "web", Constraints: "cores=2"})
	h.provision(t, "3", "a")
	h.provision(t, "1200", "a")
	h.provision(t, "1501", "b")
	if err := h.store.UpdateMachines(ctx, h.model.UUID, []muster.MachineUpdate{
		{ID: "3", Status: muster.Ptr(muster.StatusStarted), Addresses: muster.Ptr([]string{"10.0.0.3"})},
		{ID: "7", Life: muster.Ptr(muster.LifeDying)}}); err != nil {
		t.Fatal(err)
	}
	all := append(ids, "1502", "1503", "1504")

	// Built in memory, in chunks of at most MaxStatusMachines ids.
	built := api.Status{Machines: map[string]api.MachineStatus{}}
	for i := 0; i < len(all); i += api.MaxStatusMachines {
		part := all[i:min(i+api.MaxStatusMachines, len(all))]
		st, body := h.get(t, "/v1/models/default/status?machines="+strings.Join(part, ","))
		if st != http.StatusOK {
			t.Fatalf("filtered status: %d %s", st, body)
		}
		var s api.Status
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatal(err)
		}
		for id, m := range s.Machines {
			built.Machines[id] = m
		}
		built.Model, built.Provider, built.HarvestMode, built.ProvisionerError = s.Model, s.Provider, s.HarvestMode, s.ProvisionerError
	}
	built.Zones = map[string]api.ZoneStatus{"a": {Available: true, Machines: 2}, "b": {Available: false, Machines: 1}}

	st, body := h.get(t, "/v1/models/default/status")
	if st != http.StatusOK {
		t.Fatalf("status: %d %s", st, body)
	}
	var streamed api.Status
	if err := json.Unmarshal(body, &streamed); err != nil {
		t.Fatalf("streamed status is not JSON: %v", err)
	}
	if len(streamed.Machines) != len(all) || !reflect.DeepEqual(streamed, built) {
		t.Fatalf("streamed status (%d machines) differs from the built one (%d):\nstreamed %+v\nbuilt %+v",
			len(streamed.Machines), len(built.Machines), streamed.Machines["3"], built.Machines["3"])
	}
	paged, err := h.admin.Status(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(paged, built) {
		t.Fatalf("the client's paged status (%d machines) differs from the built one", len(paged.Machines))
	}
	// A page of the status: its machines and the next page's start.
	st, body = h.get(t, "/v1/models/default/status?after=1000&limit=3")
	var page api.Status
	if err := json.Unmarshal(body, &page); st != http.StatusOK || err != nil {
		t.Fatalf("status page: %d %s %v", st, body, err)
	}
	if len(page.Machines) != 3 || page.Next == nil || *page.Next != "1003" || page.Machines["1001"].Life != "alive" {
		t.Fatalf("status page after 1000 of 3: %d machines, next %v", len(page.Machines), page.Next)
	}
}
