package main

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/controller"
	"github.com/musterhq/muster/lxd"
	"github.com/spf13/cobra"
)

// demoFleet is the fleet the demo applies: a copy of examples/fleet.yaml,
// which stays the documented source (a test keeps them identical).
//
//go:embed demo_fleet.yaml
var demoFleet []byte

// demoAgentGrace is how long the demo waits, once every instance runs, for
// a first simulated agent to report its machine started before it stops
// waiting for agents; demoDockerAgentGrace is the same for agents in
// containers, demoLXDAgentGrace for agents in LXD containers booted by
// cloud-init.
const (
	demoAgentGrace       = 5 * time.Second
	demoDockerAgentGrace = 20 * time.Second
	demoLXDAgentGrace    = 2 * time.Minute
)

// demoAgentBinary, when set, is the agent binary of the demo's controller
// instead of this executable (tests run the demo from a test binary, which
// is no agent).
var demoAgentBinary string

// demoTeardownWait bounds, on exit, the wait for the demo model's instances
// to be stopped; demoTeardownTimeout bounds the whole teardown.
const (
	demoTeardownWait    = time.Minute
	demoTeardownTimeout = 2 * time.Minute
)

// demoAgentWait bounds the whole wait for agents (demoLXDAgentWait on lxd).
const (
	demoAgentWait    = 60 * time.Second
	demoLXDAgentWait = 5 * time.Minute
)

func newDemoCmd() *cobra.Command {
	var provider string
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Start a controller in a temporary directory, apply an example fleet, and watch it converge",
		Long: `Start a controller in a temporary data directory with a simulated cloud,
apply an example fleet (examples/fleet.yaml: 12 machines in 3 groups), show
progress until it converges, then print the status and how to reach the
controller from another terminal. It runs until Ctrl-C, then stops the
controller and removes the directory.

With --provider docker the machines are containers on the local Docker
Engine (one network per zone a, b, c), each running this binary as its
agent; constraints larger than the Docker host are capped to fit it. On
Ctrl-C the demo removes its machines, waits for their containers to go,
and removes the model and its networks before the controller stops.

With --provider lxd the machines are LXD system containers booted by
cloud-init, one bridge per zone; the image is built first when missing
(as by muster lxd build-image, cached in <data-dir>/lxd), and the fleet is
capped to the host as for docker.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, ok := providers[provider]; !ok {
				return usageErrorf("unknown --provider %q (known: %s)", provider, strings.Join(controller.ProviderNames(providers), ", "))
			}
			return runDemo(cmd.Context(), provider, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&provider, "provider", "sim", "provider of the demo's model")
	return cmd
}

// runDemo is `muster demo`: it returns once ctx ends and everything it
// started is stopped and removed.
func runDemo(ctx context.Context, provider string, w io.Writer) (err error) {
	fleet, err := api.ParseFleet(demoFleet)
	if err != nil {
		return fmt.Errorf("demo fleet: %w", err)
	}
	dir, err := os.MkdirTemp("", "muster-demo-")
	if err != nil {
		return fmt.Errorf("create demo directory: %w", err)
	}
	defer func() {
		if rmErr := os.RemoveAll(dir); rmErr != nil && err == nil {
			err = fmt.Errorf("remove demo directory: %w", rmErr)
		}
	}()
	logPath := filepath.Join(dir, "controller.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("create controller log: %w", err)
	}
	defer logFile.Close()
	logger := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))

	fmt.Fprintf(w, "starting a controller in %s\n", dir)
	ctrl, err := controller.Open(ctx, controller.Config{DataDir: dir, Listen: "127.0.0.1:0", Logger: logger, AgentBinary: demoAgentBinary, Providers: providers})
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), controller.StopTimeout)
		defer cancel()
		if cErr := ctrl.Close(stopCtx); cErr != nil && err == nil {
			err = cErr
		}
	}()
	cc, err := controller.LoadClientConfig(ctrl.ClientConfigPath())
	if err != nil {
		return err
	}
	c, err := dialControllers(ctx, cc)
	if err != nil {
		return err
	}
	model := muster.DefaultModel
	if provider != "sim" {
		model = "demo"
		if provider == "lxd" {
			fmt.Fprintf(w, "making sure of the lxd image (built once: minutes; build log in %s)\n", logPath)
			if err := buildLXDImage(ctx, lxd.ImageOptions{CacheDir: filepath.Join(defaultDataDir(), "lxd")}, logFile, w); err != nil {
				return err
			}
		}
		info, addErr := c.AddModel(ctx, api.AddModelRequest{Name: model, Provider: provider})
		if addErr != nil {
			return addErr
		}
		host, hostErr := controller.OpenLocalHost(ctx, provider, info, logger)
		if hostErr != nil {
			return hostErr
		}
		if host != nil {
			defer host.Close()
		}
		// Deferred after the controller's Close, so run before it.
		defer func() {
			tctx, cancel := context.WithTimeout(context.Background(), demoTeardownTimeout)
			defer cancel()
			if tErr := controller.TeardownModel(tctx, c, host, model, demoTeardownWait, w); tErr != nil && err == nil {
				err = tErr
			}
		}()
		if host != nil {
			cores, mem, err := host.Resources(ctx)
			if err != nil {
				return err
			}
			var notes []string
			if fleet, notes, err = controller.FitFleet(fleet, uint64(cores), mem); err != nil {
				return err
			}
			for _, n := range notes {
				fmt.Fprintf(w, "the %s host has %d CPUs and %s of memory: %s\n", provider, cores, muster.FormatSize(mem), n)
			}
		}
	}

	dash, err := c.DashboardURL(ctx)
	if err != nil {
		return err
	}
	if model != muster.DefaultModel {
		dash += "#model=" + url.QueryEscape(model)
	}
	fmt.Fprintf(w, "dashboard: %s\n  (one-time sign-in link, valid %s; your browser will warn about the controller's own certificate)\n", dash, api.DashboardCodeTTL)

	fmt.Fprintf(w, "applying the example fleet to model %s:\n", model)
	if err := applyFleet(ctx, c, model, fleet, false, true, w, w); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := waitAgents(ctx, c, model, provider, w); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	st, err := c.Status(ctx, model)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	fmt.Fprintln(w)
	if err := api.WriteStatusTable(w, st, false); err != nil {
		return err
	}
	fmt.Fprintf(w, `
controller: %s
controller log: %s

In another terminal:
  export MUSTER_CONFIG=%s
  muster status -m %s
  muster dashboard -m %s      # a new dashboard sign-in link

Press Ctrl-C to stop the controller and remove %s.
`, ctrl.URL(), logPath, ctrl.ClientConfigPath(), model, model, dir)
	<-ctx.Done()
	fmt.Fprintln(w, "stopping")
	return nil
}

// waitAgents waits, when the model runs agents (simulated, or in docker
// containers), until every machine is started. It stops waiting when no
// agent at all reports within the grace period (the provider may run none).
func waitAgents(ctx context.Context, c *api.Client, model, provider string, w io.Writer) error {
	grace, wait := demoAgentGrace, demoAgentWait
	switch provider {
	case "docker":
		grace = demoDockerAgentGrace
	case "lxd":
		grace, wait = demoLXDAgentGrace, demoLXDAgentWait
	default:
		cfg, err := c.ModelConfig(ctx, model)
		if err != nil {
			return err
		}
		if cfg["sim-agents"] != "true" {
			return nil
		}
	}
	st, err := c.Status(ctx, model)
	if err != nil {
		return err
	}
	goals := map[string]api.Goal{}
	for id, m := range st.Machines {
		if m.Life == string(muster.LifeAlive) && m.InstanceStatus == string(muster.InstanceRunning) {
			goals[id] = api.Started
		}
	}
	if len(goals) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	// Give up early when no agent reports at all.
	giveUp := time.AfterFunc(grace, func() {
		if st, err := c.Status(wctx, model); err == nil && !anyStarted(st) {
			cancel()
		}
	})
	defer giveUp.Stop()
	_, err = c.WaitShowing(wctx, model, goals, w, "agents starting", false)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		fmt.Fprintln(w, "(not every agent reported; going on)")
		return nil
	}
	return err
}

func anyStarted(st api.Status) bool {
	for _, m := range st.Machines {
		if m.Status == string(muster.StatusStarted) {
			return true
		}
	}
	return false
}
