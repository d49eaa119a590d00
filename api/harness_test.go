package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/internal/fakeclock"
	"github.com/musterhq/muster/sqlstore"
)

type harness struct {
	store  *sqlstore.Store
	srv    *api.Server
	ts     *httptest.Server
	clock  *fakeclock.Clock
	admin  *api.Client
	anon   *api.Client
	token  string
	model  muster.Model
	caPEM  []byte
	logBuf *bytes.Buffer
}

var start = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// newHarness starts an API server over a fresh SQLite store, with a model
// "default" (provider sim), behind TLS signed by a fresh CA.
func newHarness(tb testing.TB, hooks ...func(*api.Config)) *harness {
	tb.Helper()
	ctx := context.Background()
	clk := fakeclock.New(start)
	st, err := sqlstore.Open(ctx, filepath.Join(tb.TempDir(), "muster.db"), sqlstore.WithClock(clk), sqlstore.WithPollInterval(20*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	m, err := st.CreateModel(ctx, muster.Model{Name: "default", Provider: "sim", Settings: muster.DefaultSettings()})
	if err != nil {
		tb.Fatal(err)
	}
	token, hash := auth.NewToken()
	logBuf := &bytes.Buffer{}
	cfg := api.Config{
		Store:          st,
		ControllerUUID: muster.NewUUID(),
		AdminTokenHash: hash,
		Logger:         slog.New(slog.NewTextHandler(&lockedWriter{w: logBuf}, nil)),
		Clock:          clk,
	}
	for _, h := range hooks {
		h(&cfg)
	}
	srv, err := api.NewServer(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	ca, err := auth.NewCA("test", time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := ca.ServerCertificate([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(srv)
	ts.TLS = auth.ServerTLSConfig(cert)
	ts.StartTLS()
	tb.Cleanup(func() {
		srv.Close()
		ts.CloseClientConnections()
		ts.Close()
	})
	h := &harness{store: st, srv: srv, ts: ts, clock: clk, token: token, model: m, caPEM: ca.CertPEM, logBuf: logBuf}
	h.admin = h.client(tb, token)
	h.anon = h.client(tb, "")
	return h
}

func (h *harness) client(tb testing.TB, token string) *api.Client {
	tb.Helper()
	c, err := api.NewClient(api.ClientConfig{URL: h.ts.URL, CACert: h.caPEM, Token: token})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// raw sends a request with a raw body and returns the status and the
// decoded error code ("" for success).
func (h *harness) raw(tb testing.TB, method, path, token string, body []byte) (int, string) {
	tb.Helper()
	req, err := http.NewRequest(method, h.ts.URL+path, bytes.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		auth.SetBearerToken(req, token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.client(tb, "").HTTPClient().Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode < 300 {
		return resp.StatusCode, ""
	}
	var eb struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(b, &eb); err != nil {
		tb.Fatalf("%s %s: error body %q is not JSON: %v", method, path, b, err)
	}
	return resp.StatusCode, eb.Error.Code
}

func (h *harness) machines(tb testing.TB) []muster.Machine {
	tb.Helper()
	ms, err := h.store.Machines(context.Background(), h.model.UUID, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return ms
}

func (h *harness) machine(tb testing.TB, id string) muster.Machine {
	tb.Helper()
	m, err := h.store.Machine(context.Background(), h.model.UUID, id)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

func (h *harness) addMachines(tb testing.TB, req api.AddMachinesRequest) []string {
	tb.Helper()
	ids, err := h.admin.AddMachines(context.Background(), "default", req)
	if err != nil {
		tb.Fatal(err)
	}
	return ids
}

// provision gives machine id an instance, a password and a nonce, as the
// provisioner would, and returns the password and nonce.
func (h *harness) provision(tb testing.TB, id, zone string) (password, nonce string) {
	tb.Helper()
	ctx := context.Background()
	password, nonce = muster.NewSecret(), "machine-0:"+muster.NewUUID()
	err := h.store.UpdateMachines(ctx, h.model.UUID, []muster.MachineUpdate{{
		ID: id, Nonce: muster.Ptr(nonce), PasswordHash: muster.Ptr(muster.HashSecret(password)),
	}})
	if err != nil {
		tb.Fatal(err)
	}
	errs, err := h.store.RecordInstances(ctx, h.model.UUID, []muster.InstanceRecord{{
		MachineID: id, Nonce: nonce,
		Info: muster.InstanceInfo{InstanceID: "i-" + id, Zone: zone, Hardware: muster.Hardware{Arch: "amd64", AvailabilityZone: zone}},
	}})
	if err != nil || errs[0] != nil {
		tb.Fatalf("record instance: %v %v", err, errs)
	}
	return password, nonce
}

func wantCode(tb testing.TB, err error, code string) {
	tb.Helper()
	if got := muster.ErrorCode(err); got != code {
		tb.Fatalf("got error %v (code %q), want code %q", err, got, code)
	}
}

// testRuntime is a hand-written api.Runtime: each nil func answers as a
// controller with nothing configured would.
type testRuntime struct {
	zones            func(ctx context.Context, modelUUID string) ([]api.ZoneInfo, error)
	provisionerError func(modelUUID string) string
	monitors         func(modelUUID string) bool
	validateModel    func(m muster.Model) error
	agentBinary      func(sha256 string) (string, error)
	providerHandler  func(modelUUID string) http.Handler
	identityCert     []byte // nil: none
	offerings        func(modelUUID string) muster.Offerings
}

var _ api.Runtime = (*testRuntime)(nil)

func (r *testRuntime) Zones(ctx context.Context, modelUUID string) ([]api.ZoneInfo, error) {
	if r.zones == nil {
		return nil, nil
	}
	return r.zones(ctx, modelUUID)
}

func (r *testRuntime) ProvisionerError(modelUUID string) string {
	if r.provisionerError == nil {
		return ""
	}
	return r.provisionerError(modelUUID)
}

func (r *testRuntime) Monitors(modelUUID string) bool {
	return r.monitors == nil || r.monitors(modelUUID)
}

func (r *testRuntime) ValidateModel(m muster.Model) error {
	if r.validateModel == nil {
		return nil
	}
	return r.validateModel(m)
}

func (r *testRuntime) AgentBinary(sum string) (string, error) {
	if r.agentBinary == nil {
		return "", muster.Errorf(muster.ENotFound, "no agent binary with SHA-256 %s", sum)
	}
	return r.agentBinary(sum)
}

func (r *testRuntime) IdentityCert(modelUUID string) ([]byte, error) {
	if r.identityCert == nil {
		return nil, muster.Errorf(muster.EUnavailable, "no instance identity certificate")
	}
	return r.identityCert, nil
}

func (r *testRuntime) ProviderHandler(modelUUID string) http.Handler {
	if r.providerHandler == nil {
		return nil
	}
	return r.providerHandler(modelUUID)
}

func (r *testRuntime) Offerings(modelUUID string) muster.Offerings {
	if r.offerings == nil {
		return muster.Offerings{}
	}
	return r.offerings(modelUUID)
}

// withRuntime is a newHarness hook that serves the API over rt.
func withRuntime(rt *testRuntime) func(*api.Config) {
	return func(c *api.Config) { c.Runtime = rt }
}
