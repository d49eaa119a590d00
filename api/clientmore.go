package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/musterhq/muster"
)

// StatusOf is the model's status, or only that of ids (as juju status 5),
// refusing ids the model does not have.
func (c *Client) StatusOf(ctx context.Context, model string, ids []string) (Status, error) {
	if len(ids) == 0 {
		return c.Status(ctx, model)
	}
	st, err := c.MachinesStatus(ctx, model, ids)
	if err != nil {
		return st, err
	}
	var missing []string
	for _, id := range ids {
		if _, ok := st.Machines[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		return st, muster.Errorf(muster.ENotFound, "no machine %s in model %q", strings.Join(missing, ", "), model)
	}
	return st, nil
}

// WatchStatus writes the status of the model (or of ids) with write on
// every change until ctx ends: in place on a terminal, one after another
// otherwise, separated by a time line when sep.
func (c *Client) WatchStatus(ctx context.Context, model string, ids []string, w io.Writer, sep bool, write func(io.Writer, Status) error) error {
	changes, err := c.WatchChanges(ctx, model)
	if err != nil {
		return err
	}
	tty := IsTerminal(w)
	var last []byte
	for {
		st, err := c.StatusOf(ctx, model, ids)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		var buf bytes.Buffer
		if err := write(&buf, st); err != nil {
			return err
		}
		if !bytes.Equal(buf.Bytes(), last) {
			last = buf.Bytes()
			if tty {
				fmt.Fprint(w, "\033[H\033[2J")
				fmt.Fprintf(w, "%s  (every change; Ctrl-C to stop)\n\n", time.Now().Format(time.TimeOnly))
			} else if sep {
				fmt.Fprintf(w, "--- %s\n", time.Now().UTC().Format(time.RFC3339))
			}
			w.Write(buf.Bytes())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(MinRefresh):
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		}
	}
}

// RemoveModelForce removes a model with its machines: every machine dead
// at once (instances kept with keep), then, once they are gone, the model.
// Progress goes to w.
func (c *Client) RemoveModelForce(ctx context.Context, model string, keep bool, w io.Writer) error {
	ids, err := c.RemoveMachinesIDs(ctx, model, RemoveMachinesRequest{All: true, Force: true, KeepInstance: keep})
	if err != nil {
		return err
	}
	goals := map[string]Goal{}
	for _, id := range ids {
		goals[id] = Removed
	}
	if _, err := c.WaitShowing(ctx, model, goals, w, "removing machines", false); err != nil {
		return err
	}
	if err := c.RemoveModel(ctx, model); err != nil {
		return err
	}
	fmt.Fprintf(w, "removed model %s and its %d machines\n", model, len(ids))
	return nil
}

// InstanceOwners returns the model's uuid and, by instance id, the
// machine that records each instance.
func (c *Client) InstanceOwners(ctx context.Context, model string) (string, map[string]string, error) {
	m, err := c.Model(ctx, model)
	if err != nil {
		return "", nil, err
	}
	st, err := c.Status(ctx, model)
	owner := map[string]string{}
	for id, ms := range st.Machines {
		if ms.InstanceID != "" {
			owner[ms.InstanceID] = id
		}
	}
	return m.UUID, owner, err
}
