package controller

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/internal/testutil"
)

// openTest opens a controller on dir with cfg's other fields, on
// 127.0.0.1:0, and closes it at the end of the test.
func openTest(tb testing.TB, dir string, cfg Config) *Controller {
	tb.Helper()
	cfg.DataDir, cfg.Listen = dir, "127.0.0.1:0"
	if cfg.Providers == nil {
		cfg.Providers = testProviders
	}
	if cfg.ModelPoll == 0 {
		cfg.ModelPoll = 20 * time.Millisecond
	}
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{tb}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Timeout)
	defer cancel()
	c, err := Open(ctx, cfg)
	if err != nil {
		tb.Fatalf("open controller: %v", err)
	}
	tb.Cleanup(func() { closeTest(tb, c) })
	return c
}

func closeTest(tb testing.TB, c *Controller) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		tb.Errorf("close controller: %v", err)
	}
}

// testWriter logs through the test, so a failing test shows the
// controller's warnings.
type testWriter struct{ tb testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.tb.Log(string(bytes.TrimSpace(p)))
	return len(p), nil
}

// adminClient is an API client of c with the admin token of its client
// config.
func adminClient(tb testing.TB, c *Controller) *api.Client {
	tb.Helper()
	cc, err := LoadClientConfig(c.ClientConfigPath())
	if err != nil {
		tb.Fatal(err)
	}
	cl, err := api.NewClient(api.ClientConfig{URL: c.URL(), CACert: []byte(cc.CACert), Token: cc.Token})
	if err != nil {
		tb.Fatal(err)
	}
	return cl
}

// The first Open of a data dir makes the default model, the CA and a
// client config only its owner can read; an Open after Close finds them
// all again.
func TestOpenCreatesThenReuses(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	c := openTest(t, dir, Config{})
	def, err := c.Store().Model(ctx, muster.DefaultModel)
	if err != nil || def.Provider != "sim" {
		t.Fatalf("default model: got %+v, %v; want a sim model", def, err)
	}
	fi, err := os.Stat(c.ClientConfigPath())
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("client config: got %v, %v; want mode 0600", fi, err)
	}
	cc, err := LoadClientConfig(c.ClientConfigPath())
	if err != nil || len(cc.Controllers) != 1 || cc.Controllers[0] != c.URL() || cc.CACert != string(c.CA().CertPEM) {
		t.Fatalf("client config: got %+v, %v; want this controller's URL and CA", cc, err)
	}
	crt, err := os.ReadFile(filepath.Join(dir, auth.CACertFile))
	if err != nil || !bytes.Equal(crt, c.CA().CertPEM) {
		t.Fatalf("ca.crt: %v; want the store's CA", err)
	}
	if _, err := adminClient(t, c).Models(ctx); err != nil {
		t.Fatalf("the client config's token: %v", err)
	}
	uuid, id, caPEM := c.UUID(), c.ID(), c.CA().CertPEM
	closeTest(t, c)

	c2 := openTest(t, dir, Config{})
	if c2.UUID() != uuid || c2.ID() != id || !bytes.Equal(c2.CA().CertPEM, caPEM) {
		t.Errorf("after a restart: got uuid %s id %s, want %s %s and the same CA", c2.UUID(), c2.ID(), uuid, id)
	}
	def2, err := c2.Store().Model(ctx, muster.DefaultModel)
	if err != nil || def2.UUID != def.UUID {
		t.Errorf("default model after a restart: got %+v, %v; want %s", def2, err, def.UUID)
	}
	cc2, err := LoadClientConfig(c2.ClientConfigPath())
	if err != nil || cc2.Token != cc.Token || cc2.Controllers[0] != c2.URL() {
		t.Errorf("client config after a restart: got %+v, %v; want the same token and this URL first", cc2, err)
	}
	if _, err := adminClient(t, c2).Models(ctx); err != nil {
		t.Errorf("the old token after a restart: %v", err)
	}
}

// Model sync starts a provisioner for a model added to the store and
// stops it once the model is removed.
func TestModelSyncStartsAndStops(t *testing.T) {
	c := openTest(t, t.TempDir(), Config{})
	ctx := context.Background()
	def, err := c.Store().Model(ctx, muster.DefaultModel)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the default model's provisioner running", func() bool { return c.Runs(def.UUID) })
	m, err := c.Store().CreateModel(ctx, muster.Model{Name: "second", Provider: "sim", Config: map[string]string{"zones": "x,y"}, Settings: muster.DefaultSettings()})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the new model's provisioner running", func() bool { return c.Runs(m.UUID) })
	if err := c.Store().RemoveModel(ctx, m.UUID); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the removed model's provisioner stopped", func() bool { return !c.Runs(m.UUID) })
	if !c.Runs(def.UUID) {
		t.Error("the default model's provisioner stopped with the other model's")
	}
}

// countingProvider counts the Zones calls of the provider it wraps.
type countingProvider struct {
	muster.Provider
	zones *atomic.Int64
}

func (p countingProvider) Zones(ctx context.Context) ([]muster.Zone, error) {
	p.zones.Add(1)
	return p.Provider.Zones(ctx)
}

// Status and zones requests answer from the provisioner's zone table:
// they never call the provider (E2: every call goes through the model's
// rate limiter, in the provisioner).
func TestZoneRequestsDoNotCallTheProvider(t *testing.T) {
	var calls atomic.Int64
	counting := ProviderKind{ConfigKeys: Sim.ConfigKeys, Open: func(ctx context.Context, env ProviderEnv) (*ModelProvider, error) {
		mp, err := Sim.Open(ctx, env)
		if err != nil {
			return nil, err
		}
		mp.Provider = countingProvider{mp.Provider, &calls}
		return mp, nil
	}}
	c := openTest(t, t.TempDir(), Config{Providers: map[string]ProviderKind{"sim": counting}})
	cl := adminClient(t, c)
	ctx := context.Background()
	testutil.Eventually(t, "the provisioner's zone table", func() bool {
		zs, err := cl.Zones(ctx, muster.DefaultModel)
		return err == nil && len(zs) == 3
	})
	before := calls.Load()
	if before == 0 {
		t.Fatal("the provisioner never listed the zones")
	}
	for range 10 {
		st, err := cl.Status(ctx, muster.DefaultModel)
		if err != nil || len(st.Zones) != 3 || !st.Zones["a"].Available {
			t.Fatalf("status: got zones %v, %v; want 3 available", st.Zones, err)
		}
		if _, err := cl.Zones(ctx, muster.DefaultModel); err != nil {
			t.Fatal(err)
		}
	}
	if got := calls.Load(); got != before {
		t.Errorf("20 API requests made %d provider Zones calls, want none", got-before)
	}
}

// A model this controller does not run answers from the store: the zones
// its machines' instances were recorded in.
func TestZonesOfAModelRunElsewhere(t *testing.T) {
	c := openTest(t, t.TempDir(), Config{})
	ctx := context.Background()
	// A provider no controller has: no provisioner runs it here.
	m, err := c.Store().CreateModel(ctx, muster.Model{Name: "elsewhere", Provider: "cloud-of-another-build", Settings: muster.DefaultSettings()})
	if err != nil {
		t.Fatal(err)
	}
	zs, err := c.Zones(ctx, m.UUID)
	if err != nil || len(zs) != 0 {
		t.Fatalf("no machines: got %v, %v; want no zones", zs, err)
	}
	recordInstance(t, c.Store(), m.UUID, "b")
	zs, err = c.Zones(ctx, m.UUID)
	if want := (api.ZoneInfo{Name: "b", Available: true, Machines: 1}); err != nil || len(zs) != 1 || !reflect.DeepEqual(zs[0], want) {
		t.Fatalf("got %v, %v; want [%v]", zs, err, want)
	}
	// The capacity memory of its cloud is in the store too (Z7).
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if err := c.Store().BlockCapacity(ctx, muster.CapacityBlock{Cloud: "model/" + m.UUID, Zone: "c", Shape: "arch=amd64 cores=2", Until: until}); err != nil {
		t.Fatal(err)
	}
	zs, err = c.Zones(ctx, m.UUID)
	if err != nil || len(zs) != 2 || zs[1].Name != "c" || len(zs[1].Blocked) != 1 || !zs[1].Blocked[0].Until.Equal(until) {
		t.Fatalf("got %+v, %v; want b, and c blocked for arch=amd64 cores=2", zs, err)
	}
}

// TestDataDirCAMovesIntoStore starts a controller on a data dir that has
// a CA of its own (made before the CA moved into the store) and a new
// SQLite store: the data dir's CA becomes the store's, also after a
// restart.
func TestDataDirCAMovesIntoStore(t *testing.T) {
	dir := t.TempDir()
	ca, err := auth.LoadOrCreateCA(dir, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		c := openTest(t, dir, Config{})
		if !bytes.Equal(c.CA().CertPEM, ca.CertPEM) {
			t.Errorf("start %d: the controller's CA is not the data dir's", i+1)
		}
		kv, err := c.Store().ControllerConfig(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if kv[cfgCACert] != string(ca.CertPEM) || kv[cfgCAKey] != string(ca.KeyPEM) {
			t.Errorf("start %d: the store's CA is not the data dir's", i+1)
		}
		closeTest(t, c)
	}
}

// recordInstance adds a machine to the model and records an instance of
// it in zone, as a provisioner would.
func recordInstance(tb testing.TB, st muster.Store, modelUUID, zone string) {
	tb.Helper()
	ctx := context.Background()
	ms, err := st.AddMachines(ctx, modelUUID, []muster.MachineTemplate{{}})
	if err != nil {
		tb.Fatal(err)
	}
	nonce := "machine-0:" + muster.NewUUID()
	if err := st.UpdateMachines(ctx, modelUUID, []muster.MachineUpdate{{ID: ms[0].ID, Nonce: muster.Ptr(nonce)}}); err != nil {
		tb.Fatal(err)
	}
	errs, err := st.RecordInstances(ctx, modelUUID, []muster.InstanceRecord{{MachineID: ms[0].ID, Nonce: nonce,
		Info: muster.InstanceInfo{InstanceID: "i-" + ms[0].ID, Zone: zone}}})
	if err != nil || errs[0] != nil {
		tb.Fatalf("record instance: %v %v", err, errs)
	}
}
