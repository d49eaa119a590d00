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
	"github.com/musterhq/muster/docker"
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
// containers.
const (
	demoAgentGrace       = 5 * time.Second
	demoDockerAgentGrace = 20 * time.Second
)

// demoAgentBinary, when set, is the agent binary of the demo's controller
// instead of this executable (tests run the demo from a test binary, which
// is no agent).
var demoAgentBinary string

// demoTeardownWait bounds, on exit, the wait for the demo model's instances
// to be stopped; demoTeardownTimeout bounds the whole teardown.
const (
	demoTeardownWait    = 20 * time.Second
	demoTeardownTimeout = 45 * time.Second
)

// demoAgentWait bounds the whole wait for simulated agents.
const demoAgentWait = 60 * time.Second

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
and removes the model and its networks before the controller stops.`,
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
		info, addErr := c.AddModel(ctx, api.AddModelRequest{Name: model, Provider: provider})
		if addErr != nil {
			return addErr
		}
		var dk *docker.Provider
		if provider == "docker" {
			var dkErr error
			dk, dkErr = docker.New(ctx, docker.Config{ControllerUUID: info.ControllerUUID, ModelUUID: info.UUID, ModelName: model, Logger: logger})
			if dkErr != nil {
				return dkErr
			}
			defer dk.Close()
		}
		// Deferred after the controller's Close, so run before it.
		defer func() {
			if tErr := teardownDemoModel(c, dk, model, w); tErr != nil && err == nil {
				err = tErr
			}
		}()
		if dk != nil {
			cores, mem, err := dk.Resources(ctx)
			if err != nil {
				return err
			}
			if fleet, err = fitFleet(fleet, uint64(cores), mem, w); err != nil {
				return err
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
	if err := writeStatusTable(w, st); err != nil {
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
	grace := demoAgentGrace
	if provider == "docker" {
		grace = demoDockerAgentGrace
	} else {
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
			goals[id] = agentStarted
		}
	}
	if len(goals) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, demoAgentWait)
	defer cancel()
	// Give up early when no agent reports at all.
	giveUp := time.AfterFunc(grace, func() {
		if st, err := c.Status(wctx, model); err == nil && !anyStarted(st) {
			cancel()
		}
	})
	defer giveUp.Stop()
	_, err = waitForShowing(wctx, c, model, goals, w, "agents starting", agentState)
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

// agentState is a machine's status for progress lines.
func agentState(m api.MachineStatus, ok bool) string {
	if !ok {
		return "removed"
	}
	if m.Status == "" {
		return "pending"
	}
	return m.Status
}

// agentStarted is reached when a machine's agent has reported it started.
func agentStarted(_ string, m api.MachineStatus, ok bool) (bool, string) {
	return !ok || m.Status == string(muster.StatusStarted), ""
}

// fitFleet caps the groups' cores and mem constraints at what the docker
// host has (a container cannot have more), telling w what it changed.
func fitFleet(f api.ApplyRequest, cores, memMiB uint64, w io.Writer) (api.ApplyRequest, error) {
	out := api.ApplyRequest{Groups: make([]api.FleetGroup, len(f.Groups))}
	copy(out.Groups, f.Groups)
	for i := range out.Groups {
		g := &out.Groups[i]
		cons, err := muster.ParseConstraints(g.Constraints)
		if err != nil {
			return api.ApplyRequest{}, fmt.Errorf("group %q: %w", g.Name, err)
		}
		was := cons.String()
		if cores > 0 && cons.Cores > cores {
			cons.Cores = cores
		}
		if memMiB > 0 && cons.Mem > memMiB {
			cons.Mem = memMiB
		}
		if now := cons.String(); now != was {
			fmt.Fprintf(w, "the docker host has %d CPUs and %s of memory: group %s gets %q instead of %q\n",
				cores, muster.FormatSize(memMiB), g.Name, now, was)
			g.Constraints = now
		}
	}
	return out, nil
}

// teardownDemoModel removes the demo model of a provider other than the
// sim, so that nothing stays behind on the provider: its machines at once
// (force), then, once their instances are gone (at most demoTeardownWait),
// the model, whose removal makes the controller remove the provider's
// networks. With dk it checks that the docker engine holds nothing of the
// model any more, and removes left-over networks and volumes itself.
func teardownDemoModel(c *api.Client, dk *docker.Provider, model string, w io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), demoTeardownTimeout)
	defer cancel()
	st, err := c.Status(ctx, model)
	if err != nil {
		return fmt.Errorf("remove demo model: %w", err)
	}
	goals, alive := map[string]api.Goal{}, map[string]api.Goal{}
	for id, m := range st.Machines {
		goals[id] = api.Removed
		if m.Life != string(muster.LifeDead) {
			alive[id] = api.Removed // dead ones are on their way out already
		}
	}
	if len(alive) > 0 {
		fmt.Fprintf(w, "removing the %d machines of model %s\n", len(goals), model)
		if err := c.RemoveMachines(ctx, model, api.RemoveMachinesRequest{IDs: sortedIDs(alive), Force: true}); err != nil {
			return fmt.Errorf("remove demo machines: %w", err)
		}
	}
	// Wait for the provisioner to stop the instances and forget the
	// machines, and for their containers to go.
	wctx, wcancel := context.WithTimeout(ctx, demoTeardownWait)
	left := len(goals)
	// An error only ends the wait early: what is left is reported below.
	c.Wait(wctx, model, goals, func(_ api.Status, done int, _ []string) { left = len(goals) - done })
	containers := 0
	pollUntil(wctx, func() bool {
		containers = 0
		if dk == nil {
			return true
		}
		lo, err := dk.Leftovers(wctx)
		for _, l := range lo {
			if strings.HasPrefix(l, "container ") {
				containers++
			}
		}
		return err == nil && containers == 0
	})
	wcancel()
	if left > 0 || containers > 0 {
		fmt.Fprintf(w, "after %s, %d machines and %d containers remain\n", demoTeardownWait, left, containers)
	}
	// The model goes once its machines have.
	if !pollUntil(ctx, func() bool { err = c.RemoveModel(ctx, model); return muster.ErrorCode(err) != muster.EConflict }) || err != nil {
		return fmt.Errorf("remove demo model: %w", err)
	}
	fmt.Fprintf(w, "removed model %s\n", model)
	if dk == nil {
		return nil
	}
	// The controller removes the networks as it stops the model's
	// provisioner; wait for that, then sweep what is left.
	var lo []string
	if pollUntil(ctx, func() bool { lo, err = dk.Leftovers(ctx); return err != nil || len(lo) == 0 }) {
		if err != nil {
			return fmt.Errorf("list the demo's docker objects: %w", err)
		}
		fmt.Fprintln(w, "no container, network or volume of the demo is left")
		return nil
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer ccancel()
	cerr := dk.Cleanup(cctx)
	if lo, err = dk.Leftovers(cctx); err == nil && len(lo) == 0 {
		return nil
	}
	return fmt.Errorf("the demo left on docker: %s (%v)", strings.Join(lo, ", "), cerr)
}

// pollUntil calls cond every 250ms until it holds (true) or ctx ends
// (false).
func pollUntil(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(250 * time.Millisecond):
		}
	}
	return true
}
