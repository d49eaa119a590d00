package docker

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/providertest"
)

func TestProviderConformance(t *testing.T) {
	parallelDocker(t)
	providertest.Run(t, func(tb testing.TB) providertest.Fixture {
		parallelDocker(tb)
		proxy := newSlowProxy(tb)
		p := newProvider(tb, func(c *Config) { c.Host = proxy.host; c.Zones = []string{"a"} })
		ei, err := p.engineInfo(testContext(tb))
		if err != nil {
			tb.Fatal(err)
		}
		unfittable := muster.Constraints{Cores: uint64(ei.NCPU) + 1}
		return providertest.Fixture{
			Provider:       p,
			ControllerUUID: p.cfg.ControllerUUID,
			ModelUUID:      p.cfg.ModelUUID,
			Other: func(tb testing.TB, controller, model string) muster.Provider {
				return newProvider(tb, func(c *Config) { c.ControllerUUID, c.ModelUUID = controller, model })
			},
			Unfittable:  &unfittable,
			ExhaustZone: func(tb testing.TB, zone string) { exhaustZone(tb, p, zone) },
			Slow: func(tb testing.TB) {
				proxy.slow.Store(true)
				tb.Cleanup(func() { proxy.slow.Store(false) })
			},
			Wait: 10 * time.Second,
		}
	})
}

// exhaustZone takes the zone's address space away: the zone's network is
// removed, and its subnet is given to a foreign network and configured for
// the zone, so that the zone's network cannot be made again.
func exhaustZone(tb testing.TB, p *Provider, zone string) {
	tb.Helper()
	ctx := testContext(tb)
	zn, err := p.zoneNetwork(ctx, zone)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := p.cli.NetworkRemove(ctx, zn.ID, client.NetworkRemoveOptions{}); err != nil {
		tb.Fatalf("remove network of zone %s: %v", zone, err)
	}
	blocker := blockerNetwork(tb, p.cli)
	p.mu.Lock()
	delete(p.networks, zone)
	p.subnets[zone] = blocker
	p.mu.Unlock()
}

// TestZoneWithoutAddressSpace configures a zone's subnet that another
// network holds: the zone is unavailable and starts there fail with a
// capacity error of that zone.
func TestZoneWithoutAddressSpace(t *testing.T) {
	parallelDocker(t)
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	taken := blockerNetwork(t, cli)
	p := newProvider(t, func(c *Config) { c.Subnets = map[string]string{"b": taken.String()} })
	ctx := testContext(t)
	zones, err := p.Zones(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []muster.Zone{{Name: "a", Available: true}, {Name: "b", Available: false}, {Name: "c", Available: true}}
	if len(zones) != 3 || zones[0] != want[0] || zones[1] != want[1] || zones[2] != want[2] {
		t.Errorf("zones: got %v, want %v", zones, want)
	}
	_, err = p.StartInstance(ctx, params(p, "0", "b"))
	var pe *muster.ProviderError
	if !errors.As(err, &pe) || pe.Kind != muster.ErrCapacity || pe.Zone != "b" {
		t.Errorf("start in zone b: got %v, want a capacity error of zone b", err)
	}
	if insts, _ := p.Instances(ctx); len(insts) != 0 {
		t.Errorf("instances: got %d, want 0", len(insts))
	}
}

// blockerNetwork makes a network of the test's own (removed when the test
// ends) and returns its subnet.
func blockerNetwork(tb testing.TB, cli *client.Client) netip.Prefix {
	tb.Helper()
	ctx := testContext(tb)
	res, err := cli.NetworkCreate(ctx, "muster-test-blocker-"+randomHex(4), client.NetworkCreateOptions{
		Driver: "bridge", Labels: map[string]string{"muster-test": "foreign"},
	})
	if err != nil {
		tb.Fatalf("create blocker network: %v", err)
	}
	tb.Cleanup(func() {
		if _, err := cli.NetworkRemove(context.Background(), res.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			tb.Errorf("remove blocker network: %v", err)
		}
	})
	ins, err := cli.NetworkInspect(ctx, res.ID, client.NetworkInspectOptions{})
	if err != nil || len(ins.Network.IPAM.Config) == 0 {
		tb.Fatalf("inspect blocker network: %v", err)
	}
	return ins.Network.IPAM.Config[0].Subnet
}

// slowProxy forwards a unix socket to the engine's; once slow is set, it
// stops forwarding requests, so that only cancellation ends a call.
type slowProxy struct {
	host string
	slow atomic.Bool
}

func newSlowProxy(tb testing.TB) *slowProxy {
	tb.Helper()
	target := "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); strings.HasPrefix(h, "unix://") {
		target = strings.TrimPrefix(h, "unix://")
	} else if h != "" {
		tb.Skipf("the slow proxy needs a unix DOCKER_HOST, have %s", h)
	}
	dir, err := os.MkdirTemp("", "mdp")
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(dir, "d.sock"))
	if err != nil {
		tb.Fatal(err)
	}
	sp := &slowProxy{host: "unix://" + ln.Addr().String()}
	stop := make(chan struct{})
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("unix", target)
			if err != nil {
				c.Close()
				continue
			}
			track(c)
			track(s)
			wg.Add(2)
			go func() {
				defer wg.Done()
				defer s.Close()
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 && sp.slow.Load() {
						<-stop
						return
					}
					if n > 0 {
						if _, werr := s.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
			go func() {
				defer wg.Done()
				defer c.Close()
				io.Copy(c, s)
			}()
		}
	}()
	tb.Cleanup(func() {
		close(stop)
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
		os.RemoveAll(dir)
	})
	return sp
}
