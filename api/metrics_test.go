package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/prometheus/client_golang/prometheus"
)

// The API counts its requests by route pattern (not by path, so machine
// ids make no series), method and code, and says which build it runs.
func TestRequestMetricsAndVersion(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := newHarness(t, func(c *api.Config) { c.Metrics, c.Registerer = reg, reg })
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 2})
	for _, id := range []string{"0", "1", "7"} {
		h.admin.Machine(ctx, "default", id)
	}
	b, err := h.admin.Version(ctx)
	if err != nil || b.Version != muster.Version || b.GoVersion == "" {
		t.Fatalf("Version() = %+v, %v", b, err)
	}
	if _, err := h.anon.Version(ctx); muster.ErrorCode(err) != muster.EUnauthorized {
		t.Errorf("Version without a token: %v, want unauthorized", err)
	}
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += " " + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				got[key] = m.Counter.GetValue()
			case m.Gauge != nil:
				got[key] = m.Gauge.GetValue()
			case m.Histogram != nil:
				got[key] = float64(m.Histogram.GetSampleCount())
			}
		}
	}
	b0 := muster.BuildInfo()
	for key, want := range map[string]float64{
		"muster_api_requests_total code=200 method=GET route=GET /v1/models/{model}/machines/{id}":                                       2,
		"muster_api_requests_total code=404 method=GET route=GET /v1/models/{model}/machines/{id}":                                       1,
		"muster_api_requests_total code=201 method=POST route=POST /v1/models/{model}/machines":                                          1,
		"muster_api_requests_total code=200 method=GET route=GET /v1/version":                                                            1,
		"muster_api_requests_total code=401 method=GET route=GET /v1/version":                                                            1,
		"muster_api_request_seconds route=GET /v1/models/{model}/machines/{id}":                                                          3,
		"muster_build_info build_date=" + b0.Date + " commit=" + b0.Commit + " goversion=" + b0.GoVersion + " version=" + muster.Version: 1,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
	for key := range got {
		if strings.Contains(key, "machines/7") || strings.Contains(key, "machines/0") {
			t.Errorf("a series per path: %s", key)
		}
	}
}
