package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/internal/fakeclock"
	"github.com/musterhq/muster/sqlstore"
)

var start = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// harness is a real API server over TLS on a SQLite store, with a fake
// clock driving both the server's heartbeat monitor and the agents.
type harness struct {
	store *sqlstore.Store
	ts    *httptest.Server
	clock *fakeclock.Clock
	admin *api.Client
	model muster.Model
	caPEM []byte

	logins          atomic.Int64 // login requests seen
	machineWrites   atomic.Int64 // SetAgentMachine requests seen
	stripReports    atomic.Bool  // enrolments reach the server without their report
	heartbeats      atomic.Int64 // heartbeat requests seen
	blockHeartbeats atomic.Bool  // answer heartbeats 503, as if the network dropped them
}

func newHarness(tb testing.TB) *harness { tb.Helper(); return newHarnessRuntime(tb, nil) }

// newHarnessRuntime is newHarness with the server's api.Runtime.
func newHarnessRuntime(tb testing.TB, rt api.Runtime) *harness {
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
	srv, err := api.NewServer(api.Config{
		Store: st, ControllerUUID: muster.NewUUID(), AdminTokenHash: hash, Clock: clk,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Runtime: rt,
	})
	if err != nil {
		tb.Fatal(err)
	}
	srv.Start()
	ca, err := auth.NewCA("test", time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := ca.ServerCertificate([]string{"127.0.0.1"}, time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	h := &harness{store: st, clock: clk, model: m, caPEM: ca.CertPEM}
	h.ts = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/agent/login":
			h.logins.Add(1)
		case r.Method == http.MethodPut && strings.HasPrefix(r.URL.Path, "/v1/agent/models/"):
			h.machineWrites.Add(1)
		case r.URL.Path == api.EnrolPath && h.stripReports.Load():
			var req api.EnrolRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			req.Report = nil
			b, _ := json.Marshal(req)
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		case strings.HasSuffix(r.URL.Path, "/heartbeat"):
			h.heartbeats.Add(1)
			if h.blockHeartbeats.Load() {
				http.Error(w, "blocked", http.StatusServiceUnavailable)
				return
			}
		}
		srv.ServeHTTP(w, r)
	}))
	h.ts.TLS = auth.ServerTLSConfig(cert)
	h.ts.StartTLS()
	tb.Cleanup(func() {
		srv.Close()
		h.ts.CloseClientConnections()
		h.ts.Close()
	})
	h.admin, err = api.NewClient(api.ClientConfig{URL: h.ts.URL, CACert: ca.CertPEM, Token: token})
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// provision adds a machine with an instance, a password and a nonce, as
// the provisioner would, and returns the agent config of its instance.
func (h *harness) provision(tb testing.TB, zone string) muster.AgentConfig {
	tb.Helper()
	ctx := context.Background()
	ids, err := h.admin.AddMachines(ctx, "default", api.AddMachinesRequest{Count: 1})
	if err != nil {
		tb.Fatal(err)
	}
	id := ids[0]
	password, nonce := muster.NewSecret(), "machine-0:"+muster.NewUUID()
	if err := h.store.UpdateMachines(ctx, h.model.UUID, []muster.MachineUpdate{{
		ID: id, Nonce: muster.Ptr(nonce), PasswordHash: muster.Ptr(muster.HashSecret(password)),
	}}); err != nil {
		tb.Fatal(err)
	}
	errs, err := h.store.RecordInstances(ctx, h.model.UUID, []muster.InstanceRecord{{
		MachineID: id, Nonce: nonce,
		Info: muster.InstanceInfo{InstanceID: "i-" + id, Zone: zone, Hardware: muster.Hardware{Arch: "amd64", RootDisk: 8192, AvailabilityZone: zone}},
	}})
	if err != nil || errs[0] != nil {
		tb.Fatalf("record instance: %v %v", err, errs)
	}
	return muster.AgentConfig{
		Controller: "c", Model: h.model.UUID, Machine: id, Nonce: nonce, Password: password,
		APIAddresses: []string{h.ts.URL}, CACert: string(h.caPEM),
	}
}

func (h *harness) machine(tb testing.TB, id string) muster.Machine {
	tb.Helper()
	m, err := h.store.Machine(context.Background(), h.model.UUID, id)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// options are agent options on the harness's clock, with fixed hardware
// and addresses so that tests do not depend on the host.
func (h *harness) options(started chan<- struct{}) agent.Options {
	return agent.Options{
		Clock:     h.clock,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		Hardware:  func() muster.Hardware { return muster.Hardware{Arch: "amd64", Cores: 3, Mem: 5000} },
		Addresses: func() []string { return []string{"10.9.0.7"} },
		OnStarted: func() {
			if started != nil {
				started <- struct{}{}
			}
		},
	}
}

// running is an agent running in a goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	err    error
}

func (h *harness) run(tb testing.TB, cfg muster.AgentConfig, opts agent.Options) *running {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		err := agent.Run(ctx, cfg, opts)
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
	}()
	tb.Cleanup(func() { r.stop(tb) })
	return r
}

// stop cancels the agent and returns what Run returned.
func (r *running) stop(tb testing.TB) error {
	tb.Helper()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		tb.Fatal("agent did not stop")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

func (r *running) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// advanceUntil moves the fake clock forward by step until cond holds,
// giving the agent and the server a moment to react after each step. The
// real-time deadline only guards against hanging.
func advanceUntil(tb testing.TB, clk *fakeclock.Clock, step time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for range 20 {
			if cond() {
				return
			}
			time.Sleep(time.Millisecond)
		}
		if time.Now().After(deadline) {
			tb.Fatalf("timed out waiting for %s (fake clock at +%s)", what, clk.Now().Sub(start))
		}
		clk.Advance(step)
	}
}

func waitFor(tb testing.TB, ch <-chan struct{}, what string) {
	tb.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		tb.Fatalf("timed out waiting for %s", what)
	}
}
