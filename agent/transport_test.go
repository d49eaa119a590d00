package agent

import (
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// TestSharedClientSplitsHeartbeats: heartbeats go on their own
// connections, everything else on the shared pool, both reused.
func TestSharedClientSplitsHeartbeats(t *testing.T) {
	var conns atomic.Int64
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	ts.StartTLS()
	defer ts.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	hc, err := SharedHTTPClient(caPEM)
	if err != nil {
		t.Fatal(err)
	}
	defer hc.CloseIdleConnections()
	st := hc.Transport.(splitTransport)
	for _, path := range []string{"/v1/agent/login", "/v1/agent/models/m/machines/0/heartbeat", "/v1/agent/models/m/machines/0", "/v1/agent/models/m/machines/0/heartbeat"} {
		resp, err := hc.Post(ts.URL+path, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// One connection each, reused: two in all, one idle in each transport.
	if got := conns.Load(); got != 2 {
		t.Errorf("connections: %d, want 2 (one for heartbeats, one for the rest)", got)
	}
	if st.heartbeats.MaxConnsPerHost != sharedHeartbeatConns || st.other.MaxConnsPerHost != SharedConns {
		t.Errorf("caps: heartbeats %d, other %d", st.heartbeats.MaxConnsPerHost, st.other.MaxConnsPerHost)
	}
}
