package sim

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/musterhq/muster"
)

var _ muster.Quarantiner = (*Provider)(nil)

// Quarantine powers a model's instance off and tags it quarantined since
// since (R6), as an operator would on a real cloud: stop, then tag. An
// instance tagged already keeps its first time.
func (p *Provider) Quarantine(ctx context.Context, id string, since time.Time) error {
	return p.b.quarantine(ctx, p.controller, p.model, id, since)
}

// Restore powers a quarantined instance on again and drops its tag.
func (p *Provider) Restore(ctx context.Context, id string) error {
	return p.b.restore(ctx, p.controller, p.model, id)
}

// quarantineRequest is the body of POST /v1/quarantine and /v1/restore.
type quarantineRequest struct {
	Controller string    `json:"controller"`
	Model      string    `json:"model"`
	ID         string    `json:"id"`
	Since      time.Time `json:"since,omitzero"`
}

func (c *Cloud) quarantine(ctx context.Context, controller, model, id string, since time.Time) error {
	return c.Do(ctx, CallStop, 0, func() error {
		if err := c.power(controller, model, id, false); err != nil {
			return err
		}
		return c.tag(id, func(tags map[string]string) {
			if tags[muster.TagQuarantined] == "" {
				tags[muster.TagQuarantined] = muster.FormatQuarantineTag(since)
			}
		})
	})
}

func (c *Cloud) restore(ctx context.Context, controller, model, id string) error {
	return c.Do(ctx, CallStart, 0, func() error {
		if err := c.power(controller, model, id, true); err != nil {
			return err
		}
		return c.tag(id, func(tags map[string]string) { delete(tags, muster.TagQuarantined) })
	})
}

// power powers one of a model's instances on or off; ENotFound for an
// instance that is not the model's, unavailable while it is between
// states (try again).
func (c *Cloud) power(controller, model, id string, on bool) error {
	c.mu.Lock()
	inst := c.instances[id]
	owned := inst != nil && inst.Controller() == controller && inst.Model() == model
	c.mu.Unlock()
	if !owned {
		return muster.Errorf(muster.ENotFound, "sim: instance %s not found", id)
	}
	_, unknown, err := c.Power([]string{id}, on)
	var se *StateError
	switch {
	case len(unknown) > 0:
		return muster.Errorf(muster.ENotFound, "sim: instance %s not found", id)
	case errors.As(err, &se):
		return muster.NewProviderError(muster.ErrUnavailable, "", "%v; try again", err)
	}
	return err
}

func (c *Cloud) tag(id string, edit func(map[string]string)) error {
	if unknown := c.UpdateTags([]string{id}, edit); len(unknown) > 0 {
		return muster.Errorf(muster.ENotFound, "sim: instance %s not found", id)
	}
	return nil
}

func (c *Client) quarantine(ctx context.Context, controller, model, id string, since time.Time) error {
	return c.do(ctx, http.MethodPost, "/v1/quarantine", quarantineRequest{controller, model, id, since}, nil)
}

func (c *Client) restore(ctx context.Context, controller, model, id string) error {
	return c.do(ctx, http.MethodPost, "/v1/restore", quarantineRequest{Controller: controller, Model: model, ID: id}, nil)
}

func (s *server) quarantine(w http.ResponseWriter, r *http.Request) {
	var req quarantineRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Since.IsZero() {
		writeErr(w, muster.Errorf(muster.EInvalid, "sim: quarantine of %s without a time", req.ID))
		return
	}
	reply(w, struct{}{}, s.c.quarantine(r.Context(), req.Controller, req.Model, req.ID, req.Since))
}

func (s *server) restore(w http.ResponseWriter, r *http.Request) {
	var req quarantineRequest
	if !decode(w, r, &req) {
		return
	}
	reply(w, struct{}{}, s.c.restore(r.Context(), req.Controller, req.Model, req.ID))
}
