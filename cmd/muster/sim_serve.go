package main

import (
	"fmt"
	"time"

	"github.com/musterhq/muster/sim"
	"github.com/musterhq/muster/sim/ec2api"
	"github.com/musterhq/muster/sim/simserver"
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
		pending  time.Duration
		agents   bool

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
its SigV4 signatures must be made with (--ec2-access-key, --ec2-secret-key).

An instance whose user data carries a muster agent config (the cloud-init
user data of muster's ec2 provider, or the config a sim model with
endpoint=URL starts it with) runs a simulated agent in this process
once it is running: the real agent code, logging in to the controller named
in the config and trusting only the CA in it, so that its machine becomes
started. Stopping or terminating the instance stops its agent.
--sim-agents=false turns this off (a sim model's sim-agents setting applies
to its embedded sim only).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			zcs, err := simserver.ParseZones(zones)
			if err != nil {
				return usageError{err}
			}
			if delay < 0 {
				return usageErrorf("--save-delay %s is negative", delay)
			}
			if pending < 0 {
				return usageErrorf("--pending-time %s is negative", pending)
			}
			if maxBatch < 0 {
				return usageErrorf("--max-batch %d is negative", maxBatch)
			}
			if (ec2Key == "") != (ec2Secret == "") {
				return usageErrorf("--ec2-access-key and --ec2-secret-key go together")
			}
			out := cmd.OutOrStdout()
			return simserver.Run(cmd.Context(), simserver.Config{
				Listen:    listen,
				SimAgents: agents,
				Cloud:     sim.Config{Zones: zcs, StateFile: state, MaxBatch: maxBatch, Seed: seed, SaveDelay: delay, PendingTime: pending},
				EC2:       ec2api.Config{AccessKey: ec2Key, SecretKey: ec2Secret},
				Ready: func(url, key, secret string) {
					fmt.Fprintf(out, "sim listening on %s\n", url)
					fmt.Fprintf(out, "EC2 API at %s (region: any; AWS_ACCESS_KEY_ID=%s AWS_SECRET_ACCESS_KEY=%s)\n", url, key, secret)
				},
			})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:7070", "address to listen on (port 0 picks a free port)")
	cmd.Flags().StringVar(&zones, "zones", "a,b,c", "zones of a new cloud: NAME or NAME:CORES, comma-separated")
	cmd.Flags().StringVar(&state, "state", "", "state file that survives restarts (default: memory only)")
	cmd.Flags().IntVar(&maxBatch, "max-batch", sim.DefaultMaxBatch, "largest number of instances one start call may start")
	cmd.Flags().Uint64Var(&seed, "seed", 0, "seed for latency jitter and injected faults (0: random)")
	cmd.Flags().DurationVar(&delay, "save-delay", 0, "batch state file writes over this long (0: write every change at once)")
	cmd.Flags().DurationVar(&pending, "pending-time", 2*time.Second, "how long an instance launched through the EC2 API stays pending before it runs")
	cmd.Flags().BoolVar(&agents, "sim-agents", true, "run a simulated agent for each instance whose user data carries a muster agent config")
	cmd.Flags().StringVar(&ec2Key, "ec2-access-key", "", "access key id of the EC2 endpoint (default "+sim.DefaultEC2AccessKey+")")
	cmd.Flags().StringVar(&ec2Secret, "ec2-secret-key", "", "secret access key of the EC2 endpoint (default: the sim's well-known one)")
	return cmd
}
