package api_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/internal/testutil"
)

// get sends GET path with token over hc and returns the status.
func get(tb testing.TB, hc *http.Client, url, token string) int {
	tb.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		auth.SetBearerToken(req, token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// fromAddr is an HTTPS client of h that connects from the local address
// ip (any 127/8 address is loopback on Linux).
func fromAddr(tb testing.TB, h *harness, ip string) *http.Client {
	tb.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(h.caPEM) {
		tb.Fatal("bad ca")
	}
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// S7: /metrics on the API port answers the admin token only.
func TestMetricsNeedAdminToken(t *testing.T) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "test_gauge", Help: "A gauge."})
	g.Set(7)
	h := newHarness(t, func(c *api.Config) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(g)
		c.Metrics = reg
	})
	hc := fromAddr(t, h, "127.0.0.1")
	if got := get(t, hc, h.ts.URL+"/metrics", ""); got != http.StatusUnauthorized {
		t.Errorf("without a token: got %d, want 401", got)
	}
	if got := get(t, hc, h.ts.URL+"/metrics", h.token); got != http.StatusOK {
		t.Errorf("with the admin token: got %d, want 200", got)
	}
}

// countingWriter counts the log lines holding a string.
type countingWriter struct {
	lw  lockedWriter
	buf bytes.Buffer
}

func (c *countingWriter) Write(p []byte) (int, error) { return c.lw.Write(p) }

func (c *countingWriter) count(s string) int {
	c.lw.mu.Lock()
	defer c.lw.mu.Unlock()
	return strings.Count(c.buf.String(), s)
}

// S9: a flood of bad tokens from one source is logged in a few lines and
// a summary, and the source is refused until its window ends; a good
// token from another source still answers at once.
func TestFailedAuthLoggedAndSlowedPerSource(t *testing.T) {
	cw := &countingWriter{}
	cw.lw.w = &cw.buf
	h := newHarness(t, func(c *api.Config) { c.Logger = slog.New(slog.NewTextHandler(cw, nil)) })
	bad := fromAddr(t, h, "127.0.0.1")
	other := fromAddr(t, h, "127.0.0.2")
	url := h.ts.URL + "/v1/models"
	var statuses = map[int]int{}
	for i := range 50 {
		statuses[get(t, bad, url, fmt.Sprintf("bad-token-%d", i))]++
	}
	if statuses[http.StatusTooManyRequests] < 30 {
		t.Errorf("50 bad tokens from one source: got statuses %v, want most refused with 429", statuses)
	}
	if n := cw.count("authentication failed"); n == 0 || n > 10 {
		t.Errorf("got %d log lines for 50 failures, want 1..10", n)
	}
	if got := get(t, bad, url, h.token); got != http.StatusTooManyRequests {
		t.Errorf("the admin token from the blocked source: got %d, want 429", got)
	}
	if got := get(t, other, url, h.token); got != http.StatusOK {
		t.Errorf("the admin token from another source: got %d, want 200", got)
	}
	h.clock.Advance(2 * time.Minute)
	if got := get(t, bad, url, h.token); got != http.StatusOK {
		t.Errorf("the admin token after the window: got %d, want 200", got)
	}
	get(t, bad, url, "one-more-bad-token") // writes the summary of the last window
	if cw.count("more like this") == 0 {
		t.Errorf("no summary of the suppressed failures in the log")
	}
}

// S9: failed agent logins count too.
func TestFailedLoginsBlockTheSource(t *testing.T) {
	h := newHarness(t)
	body := []byte(`{"model":"default","machine":"0","password":"wrong"}`)
	var last int
	for range 20 {
		last, _ = h.raw(t, "POST", "/v1/agent/login", "", body)
	}
	if last != http.StatusTooManyRequests {
		t.Errorf("the 20th failed login: got %d, want 429", last)
	}
}

// S5: a body that trickles in is cut off at BodyTimeout; the connection
// does not stay open.
func TestSlowBodyCutOff(t *testing.T) {
	h := newHarness(t, func(c *api.Config) { c.BodyTimeout = 200 * time.Millisecond })
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(h.caPEM)
	conn, err := tls.Dial("tcp", h.ts.Listener.Addr().String(), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/models/default/machines HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", h.token)
	conn.SetReadDeadline(time.Now().Add(testutil.Timeout))
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatalf("waiting for the server to give up on the body: %v", err)
	}
	if n := len(h.machines(t)); n != 0 {
		t.Errorf("got %d machines, want none", n)
	}
}
