package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/docker"
	"github.com/musterhq/muster/lxd"
)

// LocalHost is the provider of a model on this host (a docker engine, an
// lxd daemon) as a tool beside the controller sees it, e.g. `muster demo`:
// the host's size, and what the host still holds of the model.
type LocalHost interface {
	// Resources returns the host's CPUs and memory (MiB).
	Resources(ctx context.Context) (cores int, memMiB uint64, err error)
	// Leftovers lists the model's objects still on the host, as
	// "container NAME" or "instance NAME", "network NAME", "volume NAME".
	Leftovers(ctx context.Context) ([]string, error)
	// Cleanup deletes them.
	Cleanup(ctx context.Context) error
	Close() error
}

// OpenLocalHost opens the provider of a model of kind docker or lxd on this
// host with the model's default config; nil for other kinds.
func OpenLocalHost(ctx context.Context, provider string, m api.ModelInfo, logger *slog.Logger) (LocalHost, error) {
	switch provider {
	case "docker":
		p, err := docker.New(ctx, docker.Config{ControllerUUID: m.ControllerUUID, ModelUUID: m.UUID, ModelName: m.Name, Logger: logger})
		if err != nil {
			return nil, err
		}
		return p, nil
	case "lxd":
		p, err := lxd.Open(ctx, lxd.Config{ControllerUUID: m.ControllerUUID, ModelUUID: m.UUID, ModelName: m.Name, Logger: logger})
		if err != nil {
			return nil, err
		}
		return p, nil
	}
	return nil, nil
}

// FitFleet caps the groups' cores and mem constraints at what a local
// host has (a container cannot have more); it returns the fleet and one
// line per group it changed.
func FitFleet(f api.ApplyRequest, cores, memMiB uint64) (api.ApplyRequest, []string, error) {
	out := api.ApplyRequest{Groups: slices.Clone(f.Groups)}
	var notes []string
	for i := range out.Groups {
		g := &out.Groups[i]
		cons, err := muster.ParseConstraints(g.Constraints)
		if err != nil {
			return api.ApplyRequest{}, nil, fmt.Errorf("group %q: %w", g.Name, err)
		}
		was := cons.String()
		if cores > 0 && cons.Cores > cores {
			cons.Cores = cores
		}
		if memMiB > 0 && cons.Mem > memMiB {
			cons.Mem = memMiB
		}
		if now := cons.String(); now != was {
			notes = append(notes, fmt.Sprintf("group %s gets %q instead of %q", g.Name, now, was))
			g.Constraints = now
		}
	}
	return out, notes, nil
}

// TeardownModel removes a model of a provider other than the sim through
// the API, so that nothing stays behind on the provider: its machines at
// once (force), then, once their instances are gone (at most wait), the
// model, whose removal makes the controller remove the provider's
// networks. With host it checks that the host holds nothing of the model
// any more, and removes what is left itself. It tells w what it does.
func TeardownModel(ctx context.Context, c *api.Client, host LocalHost, model string, wait time.Duration, w io.Writer) error {
	st, err := c.Status(ctx, model)
	if err != nil {
		return fmt.Errorf("remove model %s: %w", model, err)
	}
	goals, alive := map[string]api.Goal{}, map[string]api.Goal{}
	for id, m := range st.Machines {
		goals[id] = api.Removed
		if m.Life != string(muster.LifeDead) {
			// A dead one is on its way out: naming it could fail the
			// request if the provisioner removes it first.
			alive[id] = api.Removed
		}
	}
	if len(alive) > 0 {
		fmt.Fprintf(w, "removing the %d machines of model %s\n", len(goals), model)
		if err := c.RemoveMachines(ctx, model, api.RemoveMachinesRequest{IDs: slices.Sorted(maps.Keys(alive)), Force: true}); err != nil {
			return fmt.Errorf("remove the machines of model %s: %w", model, err)
		}
	}
	// Wait for the provisioner to stop the instances and forget the
	// machines, and for their containers to go.
	wctx, wcancel := context.WithTimeout(ctx, wait)
	left := len(goals)
	// An error only ends the wait early: what is left is reported below.
	c.Wait(wctx, model, goals, func(_ api.Status, done int, _ []string) { left = len(goals) - done })
	containers := 0
	pollUntil(wctx, func() bool {
		containers = 0
		if host == nil {
			return true
		}
		lo, err := host.Leftovers(wctx)
		for _, l := range lo {
			if strings.HasPrefix(l, "container ") || strings.HasPrefix(l, "instance ") {
				containers++
			}
		}
		return err == nil && containers == 0
	})
	wcancel()
	if left > 0 || containers > 0 {
		fmt.Fprintf(w, "after %s, %d machines and %d containers remain\n", wait, left, containers)
	}
	// The model goes once its machines have.
	if !pollUntil(ctx, func() bool { err = c.RemoveModel(ctx, model); return muster.ErrorCode(err) != muster.EConflict }) || err != nil {
		return fmt.Errorf("remove model %s: %w", model, err)
	}
	fmt.Fprintf(w, "removed model %s\n", model)
	if host == nil {
		return nil
	}
	// The controller removes the networks as it stops the model's
	// provisioner; wait for that, then sweep what is left.
	var lo []string
	if pollUntil(ctx, func() bool { lo, err = host.Leftovers(ctx); return err != nil || len(lo) == 0 }) {
		if err != nil {
			return fmt.Errorf("list what is left of model %s: %w", model, err)
		}
		fmt.Fprintf(w, "no container, instance, network or volume of model %s is left\n", model)
		return nil
	}
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer ccancel()
	cerr := host.Cleanup(cctx)
	if lo, err = host.Leftovers(cctx); err == nil && len(lo) == 0 {
		return nil
	}
	return fmt.Errorf("model %s left: %s (%v)", model, strings.Join(lo, ", "), cerr)
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
