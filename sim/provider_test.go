package sim_test

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/providertest"
	"github.com/musterhq/muster/sim"
)

const (
	testController = "ctrl-1"
	testModel      = "model-1"
)

func openCloud(tb testing.TB, cfg sim.Config) *sim.Cloud {
	tb.Helper()
	c, err := sim.Open(cfg)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// cloudFixture returns the suite's fixture for a cloud whose providers are
// made by provider.
func cloudFixture(c *sim.Cloud, provider func(controller, model string) muster.Provider) providertest.Fixture {
	unfit := muster.MustParseConstraints("cores=64")
	return providertest.Fixture{
		Provider:       provider(testController, testModel),
		ControllerUUID: testController,
		ModelUUID:      testModel,
		UnknownBase:    "plan9@4",
		Unfittable:     &unfit,
		Other: func(tb testing.TB, controller, model string) muster.Provider {
			return provider(controller, model)
		},
		ExhaustZone: func(tb testing.TB, zone string) {
			tb.Helper()
			if err := c.FailNext(zone, 1); err != nil {
				tb.Fatal(err)
			}
		},
		Slow: func(tb testing.TB) {
			tb.Helper()
			f := c.Faults()
			f.Latency = map[string]sim.Latency{}
			for _, k := range sim.CallKinds {
				f.Latency[k] = sim.Latency{Fixed: time.Hour}
			}
			if err := c.SetFaults(f); err != nil {
				tb.Fatal(err)
			}
		},
		Wait: 5 * time.Second,
	}
}

func TestConformanceInProcess(t *testing.T) {
	providertest.Run(t, func(tb testing.TB) providertest.Fixture {
		c := openCloud(tb, sim.Config{})
		return cloudFixture(c, func(ctrl, model string) muster.Provider { return c.Provider(ctrl, model) })
	})
}

func TestConformanceHTTP(t *testing.T) {
	providertest.Run(t, func(tb testing.TB) providertest.Fixture {
		c := openCloud(tb, sim.Config{})
		srv := httptest.NewServer(sim.NewServer(c))
		tb.Cleanup(srv.Close)
		client := sim.NewClient(srv.URL, srv.Client())
		return cloudFixture(c, func(ctrl, model string) muster.Provider { return client.Provider(ctrl, model) })
	})
}
