package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// waitFor waits until every machine of goals has reached its goal, showing
// progress on w, and returns the failures as "id: why", sorted by id. It
// ends early with ctx's error.
func waitFor(ctx context.Context, c *api.Client, model string, goals map[string]api.Goal, w io.Writer, what string) ([]string, error) {
	return waitForShowing(ctx, c, model, goals, w, what, machineState)
}

// waitForShowing is waitFor with the states shown in progress lines given
// by stateOf.
func waitForShowing(ctx context.Context, c *api.Client, model string, goals map[string]api.Goal, w io.Writer, what string, stateOf func(api.MachineStatus, bool) string) ([]string, error) {
	if len(goals) == 0 {
		return nil, nil
	}
	p := newProgress(w, len(goals), what)
	defer p.finish()
	return c.Wait(ctx, model, goals, func(st api.Status, done int, waiting []string) {
		detail := map[string]int{}
		for _, id := range waiting {
			m, ok := st.Machines[id]
			detail[stateOf(m, ok)]++
		}
		p.update(done, summarize(detail, st.ProvisionerError))
	})
}

// machineState is a one-word state of a machine for progress lines.
func machineState(m api.MachineStatus, ok bool) string {
	switch {
	case !ok:
		return "removed"
	case m.Life != string(muster.LifeAlive):
		return m.Life
	case m.InstanceStatus == "":
		return "pending"
	}
	return m.InstanceStatus
}

// summarize formats counts by state, e.g. "4 allocating, 2 pending".
func summarize(counts map[string]int, provisionerErr string) string {
	var parts []string
	for _, k := range sortedKeys(counts) {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
	}
	s := strings.Join(parts, ", ")
	if s == "" {
		s = "done"
	}
	if provisionerErr != "" {
		s += " (provisioner: " + provisionerErr + ")"
	}
	return s
}

// failureError reports machines that ended in error after a wait.
func failureError(failures []string) error {
	if len(failures) == 0 {
		return nil
	}
	const show = 5
	msg := strings.Join(failures[:min(show, len(failures))], "; ")
	if len(failures) > show {
		msg += fmt.Sprintf("; and %d more", len(failures)-show)
	}
	return fmt.Errorf("%d machine(s) did not provision: %s", len(failures), msg)
}
