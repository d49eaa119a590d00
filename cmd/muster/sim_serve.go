package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/sim"
	"github.com/spf13/cobra"
)

func newSimServeCmd() *cobra.Command {
	var (
		listen   string
		zones    string
		state    string
		maxBatch int
		seed     uint64
		delay    time.Duration

		ec2Key, ec2Secret string
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve a simulated cloud over HTTP",
		Long: `Serve a simulated cloud over HTTP until interrupted.

--zones lists the zones of a new cloud, each NAME (unlimited capacity) or
NAME:CORES (e.g. a,b:0,c:64). With --state the cloud keeps its state in
FILE and finds it there again after a restart (then --zones is ignored).
The first line printed is "sim listening on http://HOST:PORT"; the second
names the EC2-compatible endpoint (http://HOST:PORT, also at /ec2/) and the key pair
its SigV4 signatures must be made with (--ec2-access-key, --ec2-secret-key).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			zcs, err := parseSimZones(zones)
			if err != nil {
				return usageError{err}
			}
			if delay < 0 {
				return usageErrorf("--save-delay %s is negative", delay)
			}
			if maxBatch < 0 {
				return usageErrorf("--max-batch %d is negative", maxBatch)
			}
			if (ec2Key == "") != (ec2Secret == "") {
				return usageErrorf("--ec2-access-key and --ec2-secret-key go together")
			}
			cloud, err := sim.Open(sim.Config{Zones: zcs, StateFile: state, MaxBatch: maxBatch, Seed: seed, SaveDelay: delay,
				EC2AccessKey: ec2Key, EC2SecretKey: ec2Secret})
			if err != nil {
				return err
			}
			defer cloud.Close()
			return serveSim(cmd.Context(), cloud, listen, func(url string) {
				key, secret := cloud.EC2Credentials()
				fmt.Fprintf(cmd.OutOrStdout(), "sim listening on %s\n", url)
				fmt.Fprintf(cmd.OutOrStdout(), "EC2 API at %s (region: any; AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s)\n", url, key, secret)
			})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7070", "address to listen on (port 0 picks a free port)")
	cmd.Flags().StringVar(&zones, "zones", "a,b,c", "zones of a new cloud: NAME or NAME:CORES, comma-separated")
	cmd.Flags().StringVar(&state, "state", "", "state file that survives restarts (default: memory only)")
	cmd.Flags().IntVar(&maxBatch, "max-batch", sim.DefaultMaxBatch, "largest number of instances one start call may start")
	cmd.Flags().Uint64Var(&seed, "seed", 0, "seed for latency jitter and injected faults (0: random)")
	cmd.Flags().DurationVar(&delay, "save-delay", 0, "batch state file writes over this long (0: write every change at once)")
	cmd.Flags().StringVar(&ec2Key, "ec2-access-key", "", "access key id of the EC2 endpoint (default "+sim.DefaultEC2AccessKey+")")
	cmd.Flags().StringVar(&ec2Secret, "ec2-secret-key", "", "secret access key of the EC2 endpoint (default: the sim's well-known one)")
	return cmd
}

// parseSimZones parses "a,b:0,c:64" into zone configs.
func parseSimZones(s string) ([]sim.ZoneConfig, error) {
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

// serveSim serves cloud on addr until ctx is done, then shuts down
// gracefully; ready gets the base URL once it listens.
func serveSim(ctx context.Context, cloud *sim.Cloud, addr string, ready func(url string)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	// Requests see ctx, so calls waiting out simulated latency end at once
	// on shutdown (a cancelled call changes nothing in the cloud).
	srv := &http.Server{
		Handler:           sim.NewServer(cloud),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	ready("http://" + ln.Addr().String())
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
