package api

import (
	"context"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/musterhq/muster"
)

// Bounds of WatchChanges and Wait: the status is read again on every
// change notification of the event stream, but not more often than
// MinRefresh, and at least every maxRefresh in case the stream is
// interrupted.
const (
	MinRefresh = 200 * time.Millisecond
	maxRefresh = 2 * time.Second
)

// WatchChanges returns a channel that receives a value (coalesced)
// whenever machines of the model change, and at least every 2s, until ctx
// ends. It follows the model's event stream from its end: only change
// notifications matter here, not the backlog of the log. Authentication
// and model errors come back at once.
func (c *Client) WatchChanges(ctx context.Context, model string) (<-chan struct{}, error) {
	// After the largest seq: the stream replays nothing and carries only
	// the "machines" notifications (and events nobody here reads).
	s, err := c.FollowEvents(ctx, model, FollowOptions{After: math.MaxInt64, Reconnect: true})
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

// Goal says whether a machine has reached what is waited for (ok is false
// when the machine no longer exists), and if it ended badly, why.
type Goal func(id string, m MachineStatus, ok bool) (done bool, failure string)

// Provisioned is reached when a machine's instance is running or in
// provisioning error (a failure), or the machine is gone (a failure).
func Provisioned(_ string, m MachineStatus, ok bool) (bool, string) {
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

// Removed is reached when a machine is gone from the model.
func Removed(_ string, _ MachineStatus, ok bool) (bool, string) {
	return !ok, ""
}

// Wait waits until every machine of goals has reached its goal and
// returns the failures as "id: why", sorted by id. After each reading of
// the status it calls progress with the status, how many machines are
// done and the ids of the others. It ends early with ctx's error.
func (c *Client) Wait(ctx context.Context, model string, goals map[string]Goal, progress func(st Status, done int, waiting []string)) ([]string, error) {
	return c.wait(ctx, model, goals, progress, false)
}

func (c *Client) wait(ctx context.Context, model string, goals map[string]Goal, progress func(st Status, done int, waiting []string), failFast bool) ([]string, error) {
	if len(goals) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changes, err := c.WatchChanges(ctx, model)
	if err != nil {
		return nil, err
	}
	for {
		st, err := c.Status(ctx, model)
		if err != nil {
			return nil, err
		}
		failures, waiting := []string{}, []string{}
		for id, goal := range goals {
			m, ok := st.Machines[id]
			fin, why := goal(id, m, ok)
			switch {
			case !fin:
				waiting = append(waiting, id)
			case why != "":
				failures = append(failures, id+": "+why)
			}
		}
		progress(st, len(goals)-len(waiting), waiting)
		if len(waiting) == 0 || (failFast && len(failures) > 0) {
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
		case <-time.After(MinRefresh):
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changes:
		}
	}
}
