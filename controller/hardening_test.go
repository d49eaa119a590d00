package controller

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/internal/testutil"
)

// dialAPI opens a TLS connection to c's API, sends one admin request and
// reads its answer: the connection is then an idle keep-alive one.
func dialAPI(tb testing.TB, c *Controller, token string) (*tls.Conn, *bufio.Reader) {
	tb.Helper()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CA().CertPEM)
	conn, err := tls.Dial("tcp", strings.TrimPrefix(c.URL(), "https://"), &tls.Config{RootCAs: pool})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET /v1/controllers HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n", token)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		tb.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		tb.Fatalf("got status %d, want 200", resp.StatusCode)
	}
	return conn, br
}

func adminToken(tb testing.TB, c *Controller) string {
	tb.Helper()
	cc, err := LoadClientConfig(c.ClientConfigPath())
	if err != nil {
		tb.Fatal(err)
	}
	return cc.Token
}

// waitClosed waits until the server closes conn (a read returns EOF or a
// reset), failing after testutil.Timeout.
func waitClosed(tb testing.TB, conn *tls.Conn, br *bufio.Reader) {
	tb.Helper()
	conn.SetReadDeadline(time.Now().Add(testutil.Timeout))
	_, err := br.ReadByte()
	if ne, ok := err.(interface{ Timeout() bool }); err == nil || ok && ne.Timeout() {
		tb.Fatalf("the server did not close the idle connection: %v", err)
	}
}

// S5: an idle keep-alive connection is closed after IdleTimeout.
func TestIdleConnectionClosed(t *testing.T) {
	c := openTest(t, t.TempDir(), Config{IdleTimeout: 100 * time.Millisecond})
	conn, br := dialAPI(t, c, adminToken(t, c))
	waitClosed(t, conn, br)
}

// S5: with the connection cap reached by 50 more idle connections than
// it holds, the admin API still answers: the longest idle ones are
// closed to make room.
func TestConnectionCapKeepsAdminAnswering(t *testing.T) {
	const max = 16
	c := openTest(t, t.TempDir(), Config{MaxConns: max, IdleTimeout: time.Hour})
	token := adminToken(t, c)
	var closed atomic.Int64
	for range max + 50 {
		conn, br := dialAPI(t, c, token)
		go func() {
			if _, err := br.ReadByte(); err != nil {
				closed.Add(1)
			}
		}()
		_ = conn
	}
	testutil.Eventually(t, "50 idle connections closed by the server", func() bool { return closed.Load() >= 50 })
	if st := c.limiter.Stats(); st.Open > max {
		t.Errorf("got %d open connections, want at most %d", st.Open, max)
	}
	if _, err := adminClient(t, c).Status(context.Background(), muster.DefaultModel); err != nil {
		t.Errorf("status at the connection cap: %v", err)
	}
}

// scrape GETs url with token and returns the status and muster_machines
// as "model/status/instance-status" → value.
func scrape(tb testing.TB, hc *http.Client, url, token string) (int, map[string]float64) {
	tb.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	got := map[string]float64{}
	for _, m := range fams["muster_machines"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		got[l["model"]+"/"+l["status"]+"/"+l["instance_status"]] = m.GetGauge().GetValue()
	}
	return resp.StatusCode, got
}

// storeCounts counts the default model's machines in the store.
func storeCounts(tb testing.TB, c *Controller, modelUUID string) map[string]float64 {
	tb.Helper()
	ms, err := c.Store().Machines(context.Background(), modelUUID, nil)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]float64{}
	for _, m := range ms {
		out[muster.DefaultModel+"/"+string(m.Status)+"/"+string(m.InstanceStatus)]++
	}
	return out
}

// S7: /metrics takes the admin token on the API port and none on
// MetricsListen, and muster_machines follows the machines as they change
// status and go, from the counts the provisioner keeps.
func TestMachineMetrics(t *testing.T) {
	c := openTest(t, t.TempDir(), Config{MetricsListen: "127.0.0.1:0"})
	ctx := context.Background()
	token := adminToken(t, c)
	cl := adminClient(t, c)
	apiURL, plainURL := c.URL()+"/metrics", "http://"+c.MetricsAddr()+"/metrics"
	hc := cl.HTTPClient()
	anonCl, err := api.NewClient(api.ClientConfig{URL: c.URL(), CACert: c.CA().CertPEM})
	if err != nil {
		t.Fatal(err)
	}
	def, err := c.Store().Model(ctx, muster.DefaultModel)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.AddMachines(ctx, muster.DefaultModel, api.AddMachinesRequest{Count: 3}); err != nil {
		t.Fatal(err)
	}
	// Machines no zone can take, which the API would refuse: through the
	// store.
	nowhere := muster.MachineTemplate{Constraints: muster.MustParseConstraints("zones=nowhere"), Base: muster.DefaultBase}
	if _, err := c.Store().AddMachines(ctx, def.UUID, []muster.MachineTemplate{nowhere, nowhere}); err != nil {
		t.Fatal(err)
	}
	plain := &http.Client{}
	match := func(what string, want func(map[string]float64) bool) {
		t.Helper()
		var got, inStore map[string]float64
		testutil.Eventually(t, what, func() bool {
			_, got = scrape(t, plain, plainURL, "")
			inStore = storeCounts(t, c, def.UUID)
			return reflect.DeepEqual(got, inStore) && want(got)
		})
	}
	byInstance := func(m map[string]float64, inst muster.InstanceStatus) float64 {
		n := 0.0
		for k, v := range m {
			if strings.HasSuffix(k, "/"+string(inst)) {
				n += v
			}
		}
		return n
	}
	match("3 running and 2 provisioning errors", func(m map[string]float64) bool {
		return byInstance(m, muster.InstanceRunning) == 3 && byInstance(m, muster.InstanceProvisioningError) == 2
	})
	ms, err := c.Store().Machines(ctx, def.UUID, nil)
	if err != nil {
		t.Fatal(err)
	}
	var us []muster.MachineUpdate
	var running []string
	for _, m := range ms {
		if m.InstanceStatus == muster.InstanceRunning {
			running = append(running, m.ID)
		}
	}
	us = append(us, muster.MachineUpdate{ID: running[0], Status: muster.Ptr(muster.StatusDown)},
		muster.MachineUpdate{ID: running[1], Status: muster.Ptr(muster.StatusStarted)})
	if err := c.Store().UpdateMachines(ctx, def.UUID, us); err != nil {
		t.Fatal(err)
	}
	// The sim's agents may bring the machine back up: the counts
	// follow the store either way.
	match("a machine down and one started", func(map[string]float64) bool { return true })
	if err := cl.RemoveMachines(ctx, muster.DefaultModel, api.RemoveMachinesRequest{IDs: running[:2]}); err != nil {
		t.Fatal(err)
	}
	match("two machines removed", func(m map[string]float64) bool { return byInstance(m, muster.InstanceRunning) == 1 })

	if st, _ := scrape(t, anonCl.HTTPClient(), apiURL, ""); st != http.StatusUnauthorized {
		t.Errorf("/metrics on the API port without a token: got %d, want 401", st)
	}
	if st, _ := scrape(t, hc, apiURL, token); st != http.StatusOK {
		t.Errorf("/metrics on the API port with the admin token: got %d, want 200", st)
	}
}
