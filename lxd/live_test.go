package lxd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/providertest"
)

// needLXD skips a test unless MUSTER_TEST_LXD=1 says a daemon with the
// image is at hand (.ci/run sets it after setting LXD up), and fails it
// when the daemon does not answer (TestMain's watchdog then ends the run).
func needLXD(tb testing.TB) {
	tb.Helper()
	if os.Getenv("MUSTER_TEST_LXD") != "1" {
		tb.Skip("set MUSTER_TEST_LXD=1 to run against a real LXD daemon (with the image " + testImage() + ")")
	}
	if err := daemonAnswers(); err != nil {
		tb.Fatal(err)
	}
}

// daemonAnswers pings the daemon, giving it 30 s.
func daemonAnswers() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := NewClient(DefaultSocket)
	defer c.Close()
	if err := c.Ping(ctx); err != nil {
		return fmt.Errorf("the LXD daemon did not answer GET /1.0 and GET /1.0/instances within 30s: %w", err)
	}
	return nil
}

// testImage is the image alias the live tests use: MUSTER_TEST_LXD_IMAGE
// or DefaultImage.
func testImage() string {
	if a := os.Getenv("MUSTER_TEST_LXD_IMAGE"); a != "" {
		return a
	}
	return DefaultImage
}

func randomHex(tb testing.TB, n int) string {
	tb.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	tb.Cleanup(cancel)
	return ctx
}

// openTest opens a provider for cfg (uuids filled in when empty) and
// deletes everything of its model when the test ends.
func openTest(tb testing.TB, cfg Config) *Provider {
	tb.Helper()
	if cfg.ControllerUUID == "" {
		cfg.ControllerUUID = randomHex(tb, 16)
	}
	if cfg.ModelUUID == "" {
		cfg.ModelUUID = randomHex(tb, 16)
	}
	if cfg.Image == "" {
		cfg.Image = testImage()
	}
	p, err := Open(testCtx(tb), cfg)
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() {
		p.Close()
		// Straight to the daemon: the test may have slowed its proxy.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cfg.Socket = DefaultSocket
		q, err := Open(ctx, cfg)
		if err != nil {
			tb.Errorf("cleanup of model %s: %v", cfg.ModelUUID, err)
			return
		}
		defer q.Close()
		if err := q.Cleanup(ctx); err != nil {
			tb.Errorf("cleanup of model %s: %v", cfg.ModelUUID, err)
		}
		if left, err := q.Leftovers(ctx); err != nil || len(left) > 0 {
			tb.Errorf("left after cleanup: %v %v", left, err)
		}
	})
	return p
}

// startParams are a start of machine in p's model with a fresh token.
func startParams(p *Provider, machine, zone string) muster.StartParams {
	token := hex.EncodeToString([]byte(machine + "-" + time.Now().Format(time.RFC3339Nano)))
	return muster.StartParams{
		ControllerUUID: p.cfg.ControllerUUID, ModelUUID: p.cfg.ModelUUID, MachineID: machine,
		Zone: zone, Base: "ubuntu@24.04", Arch: "amd64", LaunchToken: token, Nonce: "machine-" + machine + ":" + token,
		Tags: map[string]string{
			muster.TagController: p.cfg.ControllerUUID, muster.TagModel: p.cfg.ModelUUID,
			muster.TagMachine: machine, muster.TagLaunchToken: token,
		},
	}
}

func TestConformance(t *testing.T) {
	needLXD(t)
	controller := randomHex(t, 16)
	providertest.Run(t, func(tb testing.TB) providertest.Fixture {
		proxy := newDaemonProxy(tb, DefaultSocket)
		p := openTest(tb, Config{ControllerUUID: controller, Zones: []string{"a", "b"}, Socket: proxy.socket})
		return providertest.Fixture{
			Provider:       p,
			ControllerUUID: controller,
			ModelUUID:      p.cfg.ModelUUID,
			Other: func(tb testing.TB, c, m string) muster.Provider {
				return openTest(tb, Config{ControllerUUID: c, ModelUUID: m, Zones: []string{"a"}})
			},
			UnknownBase: "windows@2022",
			Unfittable:  &muster.Constraints{Cores: 4096},
			Wait:        time.Minute,
			// The daemon's pool is shared by all zones, so a full one
			// is reported as a capacity error of the start's zone.
			ExhaustZone: func(tb testing.TB, zone string) {
				proxy.failNextCreate("Failed creating instance from image: write /var/lib/lxd/x: no space left on device")
			},
			Slow: func(tb testing.TB) { proxy.setSlow() },
		}
	})
}
