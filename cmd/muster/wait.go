package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/musterhq/muster/api"
)

// waitFor waits until every machine of goals has reached its goal, showing
// progress on w labelled with what and its phases (api.Progress), and
// returns the failures as "id: why", sorted by id; with failFast as soon
// as one machine failed. Interrupted, it says that the controller carries
// on.
func waitFor(ctx context.Context, c *api.Client, model string, goals map[string]api.Goal, w io.Writer, what string, failFast bool) ([]string, error) {
	if len(goals) == 0 {
		return nil, nil
	}
	ids := sortedIDs(goals)
	p := newProgress(w, len(goals), what)
	defer p.finish()
	wait := c.Wait
	if failFast {
		wait = c.WaitFailFast
	}
	failures, err := wait(ctx, model, goals, func(st api.Status, done int, _ []string) {
		p.update(done, api.Progress(st, ids))
	})
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted while %s: the controller carries on with the machines (muster status shows them)", what)
	}
	return failures, err
}

// failureError reports machines that ended in error after a wait.
func failureError(failures []string, total int) error {
	if len(failures) == 0 {
		return nil
	}
	const show = 5
	msg := strings.Join(failures[:min(show, len(failures))], "; ")
	if len(failures) > show {
		msg += fmt.Sprintf("; and %d more", len(failures)-show)
	}
	if total > len(failures) {
		msg += " (any others keep provisioning)"
	}
	return fmt.Errorf("%d machine(s) did not provision: %s", len(failures), msg)
}
