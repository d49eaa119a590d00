package ec2

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/providertest"
	"github.com/musterhq/muster/sim"
	"github.com/musterhq/muster/sim/ec2api"
	"github.com/musterhq/muster/sim/simserver"
)

// TestMain keeps the AWS SDK away from this machine's AWS configuration:
// no shared files, no profile, no instance metadata.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "muster-ec2-test")
	if err != nil {
		panic(err)
	}
	for k, v := range map[string]string{
		"AWS_CONFIG_FILE":             filepath.Join(dir, "no-config"),
		"AWS_SHARED_CREDENTIALS_FILE": filepath.Join(dir, "no-credentials"),
		"AWS_PROFILE":                 "",
		"AWS_ACCESS_KEY_ID":           "",
		"AWS_SECRET_ACCESS_KEY":       "",
		"AWS_SESSION_TOKEN":           "",
		"AWS_EC2_METADATA_DISABLED":   "true",
		"AWS_CA_BUNDLE":               "", // as on most machines: the config then gives no HTTP client
	} {
		os.Setenv(k, v)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// testZones are the sim zones of the tests, named as a region's are.
var testZones = []string{"us-east-1a", "us-east-1b", "us-east-1c"}

// simEC2 is a sim cloud served over HTTP, with its EC2 endpoint.
type simEC2 struct {
	cloud    *sim.Cloud
	endpoint string
}

// newSimEC2 opens a sim (zones testZones unless edit sets others) and
// serves it on a real HTTP server.
func newSimEC2(tb testing.TB, edit func(*sim.Config)) *simEC2 {
	tb.Helper()
	cfg := sim.Config{Zones: sim.ZoneConfigs(testZones...)}
	if edit != nil {
		edit(&cfg)
	}
	cloud, err := sim.Open(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	srv := httptest.NewServer(simHandler(cloud))
	tb.Cleanup(func() {
		srv.Close()
		cloud.Close()
	})
	return &simEC2{cloud: cloud, endpoint: srv.URL + "/ec2/"}
}

// provider opens a provider on the sim's endpoint with its key pair.
func (s *simEC2) provider(tb testing.TB, controller, model string) *Provider {
	tb.Helper()
	p, err := Open(context.Background(), Config{
		Region:      "us-east-1",
		Endpoint:    s.endpoint,
		Credentials: credentials.NewStaticCredentialsProvider(sim.DefaultEC2AccessKey, sim.DefaultEC2SecretKey, ""),
	}, controller, model)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// setFaults changes the sim's faults until the test ends.
func (s *simEC2) setFaults(tb testing.TB, edit func(*sim.Faults)) {
	tb.Helper()
	before := s.cloud.Faults()
	f := s.cloud.Faults()
	edit(&f)
	if err := s.cloud.SetFaults(f); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.cloud.SetFaults(before) })
}

func TestProviderConformance(t *testing.T) {
	providertest.Run(t, func(tb testing.TB) providertest.Fixture {
		s := newSimEC2(tb, nil)
		controller, model := muster.NewUUID(), muster.NewUUID()
		unfittable := muster.Constraints{Cores: 1000}
		return providertest.Fixture{
			Provider:       s.provider(tb, controller, model),
			ControllerUUID: controller,
			ModelUUID:      model,
			Other: func(tb testing.TB, controller, model string) muster.Provider {
				return s.provider(tb, controller, model)
			},
			UnknownBase: "ubuntu@10.04",
			Unfittable:  &unfittable,
			ExhaustZone: func(tb testing.TB, zone string) {
				if err := s.cloud.FailNext(zone, 1); err != nil {
					tb.Fatal(err)
				}
			},
			Slow: func(tb testing.TB) {
				s.setFaults(tb, func(f *sim.Faults) {
					f.Latency = map[string]sim.Latency{}
					for _, k := range sim.CallKinds {
						f.Latency[k] = sim.Latency{Fixed: time.Hour}
					}
				})
			},
			Wait: 5 * time.Second,
		}
	})
}

// simHandler serves cloud's EC2 API (and its own) with the default keys.
func simHandler(cloud *sim.Cloud) http.Handler {
	return simserver.Handler(cloud, ec2api.New(cloud, ec2api.Config{}))
}
