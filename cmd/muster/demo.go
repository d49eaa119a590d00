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
	"sort"
	"strings"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/spf13/cobra"
)

// demoFleet is the fleet the demo applies: a copy of examples/fleet.yaml,
// which stays the documented source (a test keeps them identical).
//
//go:embed demo_fleet.yaml
var demoFleet []byte

// demoAgentGrace is how long the demo waits, once every instance runs, for
// a first simulated agent to report its machine started before it stops
// waiting for agents.
const demoAgentGrace = 5 * time.Second

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
controller and removes the directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, ok := providers[provider]; !ok {
				return usageErrorf("unknown --provider %q (known: %s)", provider, strings.Join(providerNames(), ", "))
			}
			return runDemo(cmd.Context(), provider, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&provider, "provider", "sim", "provider of the demo's model")
	return cmd
}

func providerNames() []string {
	names := make([]string, 0, len(providers))
	for n := range providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// runDemo is `muster demo`: it returns once ctx ends and everything it
// started is stopped and removed.
func runDemo(ctx context.Context, provider string, w io.Writer) (err error) {
	fleet, err := parseFleet(demoFleet)
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
	ctrl, err := openController(ctx, controllerConfig{DataDir: dir, Listen: "127.0.0.1:0", Logger: logger})
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if cErr := ctrl.Close(stopCtx); cErr != nil && err == nil {
			err = cErr
		}
	}()
	cc, err := loadClientConfig(ctrl.clientPath)
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
		if _, err := c.AddModel(ctx, api.AddModelRequest{Name: model, Provider: provider}); err != nil {
			return err
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
	if err := waitAgents(ctx, c, model, w); err != nil {
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
`, ctrl.url, logPath, ctrl.clientPath, model, model, dir)
	<-ctx.Done()
	fmt.Fprintln(w, "stopping")
	return nil
}

// waitAgents waits, when the model runs simulated agents, until every
// machine is started. It stops waiting when no agent at all reports within
// demoAgentGrace (the provider may run none).
func waitAgents(ctx context.Context, c *api.Client, model string, w io.Writer) error {
	cfg, err := c.ModelConfig(ctx, model)
	if err != nil {
		return err
	}
	if cfg["sim-agents"] != "true" {
		return nil
	}
	st, err := c.Status(ctx, model)
	if err != nil {
		return err
	}
	goals := map[string]waitGoal{}
	for id, m := range st.Machines {
		if m.Life == string(muster.LifeAlive) && m.InstanceStatus == string(muster.InstanceRunning) {
			goals[id] = agentStarted
		}
	}
	if len(goals) == 0 {
		return nil
	}
	start := time.Now()
	wctx, cancel := context.WithTimeout(ctx, demoAgentWait)
	defer cancel()
	// Give up early when no agent reports at all.
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			if time.Since(start) < demoAgentGrace {
				continue
			}
			st, err := c.Status(wctx, model)
			if err != nil {
				continue
			}
			n := 0
			for _, m := range st.Machines {
				if m.Status == string(muster.StatusStarted) {
					n++
				}
			}
			if n == 0 {
				cancel()
				return
			}
		}
	}()
	_, err = waitForShowing(wctx, c, model, goals, w, "agents starting", agentState)
	if err != nil && ctx.Err() == nil && wctx.Err() != nil {
		fmt.Fprintln(w, "(not every simulated agent reported; going on)")
		return nil
	}
	return err
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
