package api_test

import (
	"bytes"
	"context"
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

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/internal/testutil"
)

// get sends GET path with token over hc and returns the status.
func get(tb testing.TB, hc *http.Client, url, token string) int {
	tb.Helper()
	st, err := send(hc, "GET", url, token, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// send sends a request and returns its status; safe off the test's
// goroutine.
func send(hc *http.Client, method, url, token string, body []byte) (int, error) {
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	if token != "" {
		auth.SetBearerToken(req, token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
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

// flood sends n requests at once and returns a channel of their statuses
// (0 for a request that failed).
func flood(hc *http.Client, n int, method, url, token string, body []byte) <-chan int {
	out := make(chan int, n)
	for range n {
		go func() {
			st, _ := send(hc, method, url, token, body)
			out <- st
		}()
	}
	return out
}

// S9: a flood of bad tokens from one source is logged in a few lines and
// a summary; past 20 failures the source's credential checks wait a
// second on the clock, 8 at a time, and more are refused at once with
// 429 until its minute ends. A good token from another source still
// answers at once.
func TestFailedAuthLoggedAndSlowedPerSource(t *testing.T) {
	cw := &countingWriter{}
	cw.lw.w = &cw.buf
	h := newHarness(t, func(c *api.Config) { c.Logger = slog.New(slog.NewTextHandler(cw, nil)) })
	bad := fromAddr(t, h, "127.0.0.1")
	other := fromAddr(t, h, "127.0.0.2")
	url := h.ts.URL + "/v1/models"
	for i := range 20 {
		if got := get(t, bad, url, fmt.Sprintf("bad-token-%d", i)); got != http.StatusUnauthorized {
			t.Fatalf("bad token %d: got %d, want 401", i, got)
		}
	}
	statuses := flood(bad, 30, "GET", url, "another-bad-token", nil)
	for range 22 { // 8 wait on the clock
		if got := <-statuses; got != http.StatusTooManyRequests {
			t.Fatalf("a bad token past the limit: got %d, want 429 while 8 wait", got)
		}
	}
	if got := get(t, other, url, h.token); got != http.StatusOK {
		t.Errorf("the admin token from another source: got %d, want 200", got)
	}
	if got := get(t, bad, url, h.token); got != http.StatusTooManyRequests {
		t.Errorf("the admin token from the flooding source: got %d, want 429", got)
	}
	h.clock.Advance(time.Second)
	for range 8 {
		if got := <-statuses; got != http.StatusUnauthorized {
			t.Errorf("a delayed bad token: got %d, want 401", got)
		}
	}
	if n := cw.count("authentication failed"); n == 0 || n > 10 {
		t.Errorf("got %d log lines for 28 failures, want 1..10", n)
	}
	h.clock.Advance(time.Minute)
	if got := get(t, bad, url, h.token); got != http.StatusOK {
		t.Errorf("the admin token after the window: got %d, want 200", got)
	}
	get(t, bad, url, "one-more-bad-token") // writes the summary of the last window
	if cw.count("more like this") == 0 {
		t.Errorf("no summary of the suppressed failures in the log")
	}
}

// S9: failed agent logins count too.
func TestFailedLoginsSlowTheSource(t *testing.T) {
	h := newHarness(t)
	body := []byte(`{"model":"default","machine":"0","password":"wrong"}`)
	for range 20 {
		h.raw(t, "POST", "/v1/agent/login", "", body)
	}
	statuses := flood(fromAddr(t, h, "127.0.0.1"), 9, "POST", h.ts.URL+"/v1/agent/login", "", body)
	if got := <-statuses; got != http.StatusTooManyRequests {
		t.Errorf("the 9th login waiting: got %d, want 429", got)
	}
	h.clock.Advance(time.Second)
	for range 8 {
		if got := <-statuses; got != http.StatusUnauthorized {
			t.Errorf("a delayed login: got %d, want 401", got)
		}
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

// S9: the token of an agent session a newer login ended is stale, not a
// guess (it carries the server's MAC): it is refused without counting as
// a failure, so agents that log in again do not slow their address down.
func TestStaleAgentTokensAreNotCounted(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 1})
	pw, nonce := h.provision(t, "0", "a")
	login := func() string {
		res, err := h.anon.Login(ctx, api.LoginRequest{Model: "default", Machine: "0", Password: pw, Nonce: nonce})
		if err != nil {
			t.Fatal(err)
		}
		return res.Token
	}
	stale := login()
	login()
	for i := range 30 {
		// A counted failure past the 20th would wait on the fake clock.
		cctx, cancel := context.WithTimeout(ctx, testutil.Timeout/2)
		_, err := h.anon.WithToken(stale).AgentMachine(cctx, "default", "0")
		cancel()
		if muster.ErrorCode(err) != muster.EUnauthorized {
			t.Fatalf("stale token, request %d: got %v, want unauthorized at once", i, err)
		}
	}
}
