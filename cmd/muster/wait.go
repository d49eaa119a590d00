package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// Polling bounds for waits: the status is read again on every change
// notification of the event stream, but not more often than minRefresh,
// and at least every maxRefresh in case the stream is interrupted.
const (
	minRefresh = 200 * time.Millisecond
	maxRefresh = 2 * time.Second
)

// watchChanges returns a channel that receives a value (coalesced) whenever
// machines of the model change, and at least every maxRefresh. It follows
// the model's event stream from its end: only change notifications matter
// here, not the backlog of the log. Authentication and model errors come
// back at once.
func watchChanges(ctx context.Context, c *api.Client, model string) (<-chan struct{}, error) {
	// After the largest seq: the stream replays nothing and carries only
	// the "machines" notifications (and events nobody here reads).
	s, err := c.FollowEvents(ctx, model, api.FollowOptions{After: math.MaxInt64, Reconnect: true})
	if err != nil {
		return nil, err
	}
	out := make(chan struct{}, 1)
	notify := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		t := time.NewTicker(maxRefresh)
		defer t.Stop()
		in := s.C()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-in:
				if !ok {
					in = nil // the ticker goes on
					continue
				}
				notify()
			case <-t.C:
				notify()
			}
		}
	}()
	return out, nil
}

// waitGoal says whether a machine has reached what is waited for (ok is
// false when the machine no longer exists), and if it ended badly, why.
type waitGoal func(id string, m api.MachineStatus, ok bool) (done bool, failure string)

// provisioned is reached when a machine's instance is running or in
// provisioning error (a failure), or the machine is gone.
func provisioned(_ string, m api.MachineStatus, ok bool) (bool, string) {
	switch {
	case !ok:
		return true, "removed"
	case m.InstanceStatus == string(muster.InstanceRunning):
		return true, ""
	case m.InstanceStatus == string(muster.InstanceProvisioningError):
		return true, "provisioning error: " + m.InstanceMessage
	}
	return false, ""
}

// removed is reached when a machine is gone from the model.
func removed(_ string, _ api.MachineStatus, ok bool) (bool, string) {
	return !ok, ""
}

// waitFor waits until every machine of goals has reached its goal, showing
// progress on w, and returns the failures as "id: why", sorted by id. It
// ends early with ctx's error.
func waitFor(ctx context.Context, c *api.Client, model string, goals map[string]waitGoal, w io.Writer, what string) ([]string, error) {
	return waitForShowing(ctx, c, model, goals, w, what, machineState)
}

// waitForShowing is waitFor with the states shown in progress lines given
// by stateOf.
func waitForShowing(ctx context.Context, c *api.Client, model string, goals map[string]waitGoal, w io.Writer, what string, stateOf func(api.MachineStatus, bool) string) ([]string, error) {
	if len(goals) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes, err := watchChanges(ctx, c, model)
	if err != nil {
		return nil, err
	}
	p := newProgress(w, len(goals), what)
	defer p.finish()
	for {
		st, err := c.Status(ctx, model)
		if err != nil {
			return nil, err
		}
		done, failures, detail := 0, []string{}, map[string]int{}
		for id, goal := range goals {
			m, ok := st.Machines[id]
			fin, why := goal(id, m, ok)
			if fin {
				done++
				if why != "" {
					failures = append(failures, id+": "+why)
				}
				continue
			}
			detail[stateOf(m, ok)]++
		}
		p.update(done, summarize(detail, st.ProvisionerError))
		if done == len(goals) {
			sort.Slice(failures, func(i, j int) bool {
				a, _, _ := strings.Cut(failures[i], ":")
				b, _, _ := strings.Cut(failures[j], ":")
				return muster.MachineIDLess(a, b)
			})
			return failures, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(minRefresh):
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changes:
		}
	}
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
