package agent

import (
	"net/http"
	"strings"
	"time"

	"github.com/musterhq/muster/auth"
)

// SharedConns is how many connections SharedHTTPClient keeps to one
// controller address.
const SharedConns = 64

// idleConnTimeout keeps an agent's connection open across heartbeats;
// the controller closes it first after its own idle timeout.
const idleConnTimeout = 5 * time.Minute

// agentTransport returns the transport of one agent: TLS trusting only
// caPEM, its connection (an agent sends one request at a time) kept open
// between heartbeats.
func agentTransport(caPEM []byte) (*http.Transport, error) {
	return newTransport(caPEM, 1, 0)
}

// SharedHTTPClient returns the client many in-process agents share
// (Options.HTTPClient): at most SharedConns long-lived connections per
// controller address, all kept open; requests beyond them wait for a free
// connection instead of dialling (and handshaking) a new one, so thousands
// of agents cost the controller a handful of sockets.
//
// Heartbeats have connections of their own (sharedHeartbeatConns), so a
// burst of logins and start-up reports queued for the shared connections
// cannot hold them back long enough to have machines set down.
func SharedHTTPClient(caPEM []byte) (*http.Client, error) {
	tr, err := newTransport(caPEM, SharedConns, SharedConns)
	if err != nil {
		return nil, err
	}
	hb, err := newTransport(caPEM, sharedHeartbeatConns, sharedHeartbeatConns)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: splitTransport{heartbeats: hb, other: tr}}, nil
}

// sharedHeartbeatConns is how many connections SharedHTTPClient keeps
// for heartbeats, which the controller answers from memory.
const sharedHeartbeatConns = 8

// splitTransport sends heartbeats on one transport and everything else on
// another.
type splitTransport struct{ heartbeats, other *http.Transport }

func (t splitTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/heartbeat") {
		return t.heartbeats.RoundTrip(r)
	}
	return t.other.RoundTrip(r)
}

// CloseIdleConnections closes both transports' idle connections (what
// http.Client.CloseIdleConnections calls).
func (t splitTransport) CloseIdleConnections() {
	t.heartbeats.CloseIdleConnections()
	t.other.CloseIdleConnections()
}

// newTransport keeps idle connections per host open for idleConnTimeout
// and opens at most maxConns per host (0: no limit).
func newTransport(caPEM []byte, idle, maxConns int) (*http.Transport, error) {
	tlsCfg, err := auth.ClientTLSConfig(caPEM)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	tr.MaxConnsPerHost = maxConns
	tr.MaxIdleConnsPerHost = idle
	tr.MaxIdleConns = 0 // no limit beyond the per-host one
	tr.IdleConnTimeout = idleConnTimeout
	return tr, nil
}
