// Package simserver is `muster sim serve`: a simulated cloud served over
// HTTP with the sim's own API (sim.NewServer, at /v1/) and the EC2 Query
// API (sim/ec2api, at POST / and /ec2/) on the same cloud.
package simserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/sim"
	"github.com/musterhq/muster/sim/ec2api"
)

// Handler serves cloud's own API and, at POST / and /ec2/, its EC2 API.
func Handler(cloud *sim.Cloud, api *ec2api.API) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", sim.NewServer(cloud))
	mux.Handle("POST /ec2/", api)
	mux.Handle("POST /ec2", api)
	mux.Handle("POST /{$}", api) // where an EC2 endpoint serves it
	return mux
}

// Config configures Run.
type Config struct {
	// Listen is the address to listen on; port 0 picks a free port.
	Listen string
	// Cloud configures the cloud (zones, state file, ...).
	Cloud sim.Config
	// EC2 configures the EC2 API (its key pair).
	EC2 ec2api.Config
	// SimAgents runs a simulated agent for each instance whose user data
	// carries a muster agent config (see agents), once the instance has
	// booted (after Cloud.PendingTime). The config's OnStart and OnStop
	// hooks are then the agents'.
	SimAgents bool
	// Ready, when set, is called once the server listens, with its base
	// URL and the EC2 API's key pair.
	Ready func(url, accessKey, secretKey string)
}

// Run opens the cloud and serves it until ctx is done, then shuts down
// gracefully and closes the cloud (writing its state file).
func Run(ctx context.Context, cfg Config) (err error) {
	var agents *agents
	if cfg.SimAgents {
		agents = newAgents(logger(cfg.Cloud), cfg.Cloud.Clock, cfg.Cloud.PendingTime)
		// Stopped last, after the server: nothing starts an agent then.
		defer agents.close()
		cfg.Cloud.OnStart, cfg.Cloud.OnStop, cfg.Cloud.OnAgentStop = agents.onStart, agents.onStop, agents.onStop
	}
	cloud, err := sim.Open(cfg.Cloud)
	if err != nil {
		return err
	}
	if cfg.SimAgents {
		agents.setCloud(cloud)
	}
	defer func() {
		if cerr := cloud.Close(); err == nil {
			err = cerr
		}
	}()
	api := ec2api.New(cloud, cfg.EC2)
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	// Requests see ctx, so calls waiting out simulated latency end at once
	// on shutdown (a cancelled call changes nothing in the cloud).
	srv := &http.Server{
		Handler:           Handler(cloud, api),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(logger(cfg.Cloud).Handler(), slog.LevelWarn),
	}
	if cfg.Ready != nil {
		key, secret := api.Credentials()
		cfg.Ready("http://"+ln.Addr().String(), key, secret)
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve sim: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve sim: %w", err)
	}
	return nil
}

func logger(cfg sim.Config) *slog.Logger {
	if cfg.Logger != nil {
		return cfg.Logger
	}
	return slog.Default()
}

// ParseZones parses "a,b:0,c:64" (NAME or NAME:CORES) into zone configs.
func ParseZones(s string) ([]sim.ZoneConfig, error) {
	var out []sim.ZoneConfig
	for _, item := range strings.Split(s, ",") {
		name, cores, hasCores := strings.Cut(strings.TrimSpace(item), ":")
		if err := muster.CheckName(name); err != nil {
			return nil, fmt.Errorf("bad zone %q in --zones: %v", item, err)
		}
		zc := sim.ZoneConfig{Name: name, Available: true, Capacity: sim.Unlimited}
		if hasCores {
			n, err := strconv.Atoi(cores)
			if err != nil || n < 0 {
				return nil, fmt.Errorf("bad capacity %q for zone %s in --zones: want a number of cores", cores, name)
			}
			zc.Capacity = n
		}
		for _, z := range out {
			if z.Name == name {
				return nil, fmt.Errorf("zone %q listed twice in --zones", name)
			}
		}
		out = append(out, zc)
	}
	return out, nil
}
