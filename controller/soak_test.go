package controller

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/internal/testutil"
)

// soakSize reads a size from the environment.
func soakSize(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		tb.Fatalf("bad %s=%q: want a positive number", name, v)
	}
	return n
}

// TestSoak provisions machines (embedded sim, agents off) while idle
// keep-alive TLS connections and a slow-body client are held against the
// controller (S5): the admin API's status calls must answer within 1 s
// throughout, and every machine must end up running. It lasts at least
// MUSTER_TEST_SOAK_SECONDS (default 45: past the 30 s idle timeout, so
// every idle connection is closed by the server and opened again once).
// Sizes: MUSTER_TEST_SOAK_MACHINES (default 1000), MUSTER_TEST_SOAK_CONNS
// (default 2000).
func TestSoak(t *testing.T) {
	if os.Getenv("MUSTER_TEST_SOAK") != "1" {
		t.Skip("soak test: set MUSTER_TEST_SOAK=1 to run it")
	}
	machines := soakSize(t, "MUSTER_TEST_SOAK_MACHINES", 1000)
	conns := soakSize(t, "MUSTER_TEST_SOAK_CONNS", 2000)
	minDuration := time.Duration(soakSize(t, "MUSTER_TEST_SOAK_SECONDS", 45)) * time.Second
	noAgents := ProviderKind{ConfigKeys: Sim.ConfigKeys, Open: func(ctx context.Context, env ProviderEnv) (*ModelProvider, error) {
		env.Store = nil // no simulated agents
		return Sim.Open(ctx, env)
	}}
	const bodyTimeout = 3 * time.Second
	c := openTest(t, t.TempDir(), Config{BodyTimeout: bodyTimeout, Providers: map[string]ProviderKind{"sim": noAgents}})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.CA().CertPEM)
	tlsCfg := &tls.Config{RootCAs: pool}
	addr := strings.TrimPrefix(c.URL(), "https://")

	// Idle keep-alive connections: one request each, then held; one
	// closed by the server is opened again, up to 3 times (not in a
	// tight loop: the test is the load, not a storm of handshakes).
	var redials, dialErrs atomic.Int64
	var firstDialErr atomic.Value
	hold := func() (net io.Closer, wait func() error, err error) {
		conn, err := tls.Dial("tcp", addr, tlsCfg)
		if err != nil {
			return nil, nil, err
		}
		fmt.Fprint(conn, "GET /nothing-here HTTP/1.1\r\nHost: x\r\n\r\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			conn.Close()
			return nil, nil, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return conn, func() error { _, err := br.ReadByte(); return err }, nil
	}
	for range conns {
		conn, wait, err := hold()
		if err != nil {
			t.Fatalf("open idle connection: %v", err)
		}
		wg.Go(func() {
			for i := 0; ; i++ {
				held := conn
				stop := context.AfterFunc(ctx, func() { held.Close() })
				wait()
				stop()
				held.Close()
				if ctx.Err() != nil || i == 3 {
					return
				}
				// Reconnect after a random pause, as real clients back
				// off: every connection was opened at once, so without it
				// all of them would reconnect in the same instant.
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Duration(rand.Int64N(int64(5 * time.Second)))):
				}
				redials.Add(1)
				if conn, wait, err = hold(); err != nil {
					dialErrs.Add(1)
					firstDialErr.CompareAndSwap(nil, err.Error())
					return
				}
			}
		})
	}

	// A slow-body client: a byte a second of a 1 MB body, again each time
	// the server cuts it off.
	var cutOff atomic.Int64
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for ctx.Err() == nil {
			conn, err := tls.Dial("tcp", addr, tlsCfg)
			if err != nil {
				return
			}
			go func() { <-ctx.Done(); conn.Close() }()
			_, err = fmt.Fprintf(conn, "POST /v1/agent/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
			for err == nil {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				_, err = conn.Write([]byte(" "))
				if err == nil {
					// The server answers (or closes) once it gives up.
					conn.SetReadDeadline(time.Now().Add(time.Millisecond))
					var b [1]byte
					if _, rerr := conn.Read(b[:]); rerr == nil || !isTimeout(rerr) {
						err = io.EOF
					}
				}
			}
			conn.Close()
			if ctx.Err() == nil {
				cutOff.Add(1)
			}
		}
	})

	// The admin's status calls, timed.
	cl := adminClient(t, c)
	var mu sync.Mutex
	var worst, worstAt time.Duration
	began := time.Now()
	var statusErrs []error
	var calls int
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			start := time.Now()
			_, err := cl.Status(ctx, muster.DefaultModel)
			d := time.Since(start)
			mu.Lock()
			if ctx.Err() == nil {
				calls++
				if d > worst {
					worst, worstAt = d, start.Sub(began)
				}
				if err != nil {
					statusErrs = append(statusErrs, err)
				}
			}
			mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})

	for left := machines; left > 0; left -= api.MaxAddMachines {
		if _, err := cl.AddMachines(ctx, muster.DefaultModel, api.AddMachinesRequest{Count: min(left, api.MaxAddMachines)}); err != nil {
			t.Fatal(err)
		}
	}
	def, err := c.Store().Model(ctx, muster.DefaultModel)
	if err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 20*time.Minute, fmt.Sprintf("%d machines running", machines), func() bool {
		ms, err := c.Store().Machines(ctx, def.UUID, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range ms {
			if m.InstanceStatus == muster.InstanceRunning {
				n++
			}
		}
		return n == machines && len(ms) == machines
	})
	provisioned := time.Since(began)
	testutil.EventuallyWithin(t, minDuration+testutil.Timeout, "the soak's minimum duration and the slow-body client cut off", func() bool {
		return time.Since(began) >= minDuration && cutOff.Load() > 0
	})
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d machines running after %s, soak %s; %d status calls, the slowest %s; %d idle connections held, %d reopened after the server closed them; slow body cut off %d times",
		machines, provisioned.Round(time.Millisecond), time.Since(began).Round(time.Second), calls, worst, conns, redials.Load(), cutOff.Load())
	if worst >= time.Second {
		t.Errorf("the slowest status call took %s, %s into the soak; want under 1s", worst, worstAt.Round(time.Millisecond))
	}
	if len(statusErrs) > 0 {
		t.Errorf("%d of %d status calls failed, the first: %v", len(statusErrs), calls, statusErrs[0])
	}
	if n := dialErrs.Load(); n > 0 {
		t.Errorf("%d idle connections could not be opened again, the first: %v", n, firstDialErr.Load())
	}
}

func isTimeout(err error) bool {
	te, ok := err.(interface{ Timeout() bool })
	return ok && te.Timeout()
}
