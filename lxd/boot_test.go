package lxd

import (
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/auth"
)

// agentCall is what the fake agent sends back when systemd starts it.
type agentCall struct {
	config     muster.AgentConfig
	invocation string // systemd's INVOCATION_ID: set only for a service
}

// TestBootRunsCloudInitUserData boots a container from the image with the
// cloudinit user data of a real start: cloud-init must write the CA and
// agent config, download the agent binary over HTTPS from a server on the
// zone's bridge gateway (verifying it with the CA), check its SHA-256,
// install it and start it under systemd. The binary is a fake agent that
// posts its config back, with the systemd invocation id.
func TestBootRunsCloudInitUserData(t *testing.T) {
	needLXD(t)
	p := openTest(t, Config{Zones: []string{"boot"}})
	ctx := testCtx(t)
	gws, err := p.GatewayAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gw := gws[0]
	ca, err := auth.NewCA("muster lxd boot test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.ServerCertificate([]string{gw}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(gw, "0"))
	if err != nil {
		t.Fatal(err)
	}
	base := "https://" + ln.Addr().String()
	fake := []byte("#!/bin/sh\n# fake muster agent: $1=agent $2=--config $3=FILE\n" +
		"exec curl -fsS --retry 10 --retry-connrefused --cacert /etc/muster/ca.pem -H \"X-Invocation: $INVOCATION_ID\" --data-binary @\"$3\" " + base + "/started\n")
	sum := sha256.Sum256(fake)
	sha := hex.EncodeToString(sum[:])
	var (
		mu        sync.Mutex
		downloads int
	)
	calls := make(chan agentCall, 4)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/agent-binaries/{sha}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("sha") != sha {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		downloads++
		mu.Unlock()
		w.Write(fake)
	})
	mux.HandleFunc("POST /started", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		cfg, err := muster.ParseAgentConfig(b)
		if err != nil {
			t.Errorf("fake agent sent a bad config: %v: %s", err, b)
		}
		calls <- agentCall{config: cfg, invocation: r.Header.Get("X-Invocation")}
	})
	srv := &http.Server{Handler: mux, TLSConfig: auth.ServerTLSConfig(cert)}
	go srv.Serve(tls.NewListener(ln, srv.TLSConfig))
	t.Cleanup(func() { srv.Close() })

	sp := startParams(p, "0", "boot")
	cfg := muster.AgentConfig{
		Controller: p.cfg.ControllerUUID, Model: p.cfg.ModelUUID, Machine: "0", Nonce: sp.Nonce,
		Password: muster.NewSecret(), APIAddresses: []string{base}, CACert: string(ca.CertPEM),
	}
	if sp.UserData, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	sp.Password = cfg.Password
	sp.AgentBinaries = []muster.AgentBinary{{Version: "1.0.0", OS: "linux", Arch: "amd64", SHA256: sha, URL: base + "/v1/agent-binaries/" + sha}}
	began := time.Now()
	res, err := p.StartInstance(ctx, sp)
	if err != nil {
		t.Fatalf("StartInstance: %v", err)
	}
	started := time.Since(began)
	select {
	case c := <-calls:
		t.Logf("StartInstance took %v; the agent called back %v after the start began", started.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
		if c.config.Nonce != sp.Nonce || c.config.Password != cfg.Password || c.config.Machine != "0" {
			t.Errorf("agent config on the instance: got %+v, want machine 0 with the start's nonce and password", c.config)
		}
		if c.invocation == "" {
			t.Errorf("the agent was not started by systemd (no INVOCATION_ID)")
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the agent of instance %s did not call back within 2m (downloads: %d)", res.Instance.ID, downloads)
	}
	mu.Lock()
	defer mu.Unlock()
	if downloads != 1 {
		t.Errorf("agent binary downloaded %d times, want 1", downloads)
	}
	if !strings.HasPrefix(res.Instance.ID, "mu-") {
		t.Errorf("instance id %q", res.Instance.ID)
	}
}
