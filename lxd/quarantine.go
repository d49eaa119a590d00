package lxd

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/musterhq/muster"
)

var _ muster.Quarantiner = (*Provider)(nil)

// keyQuarantined is the config key of R6's mark, like every muster tag a
// user.* key, so Instances lists it as the muster-quarantined tag.
const keyQuarantined = keyPrefix + muster.TagQuarantined

// Quarantine stops one of the model's instances (not deleted: its root
// disk and volumes stay) and sets user.muster-quarantined; an instance
// marked already keeps its first time.
func (p *Provider) Quarantine(ctx context.Context, id string, since time.Time) error {
	in, err := p.ownInstance(ctx, id)
	if err != nil {
		return err
	}
	if !strings.EqualFold(in.Status, "Stopped") {
		if err := p.c.SetState(ctx, id, "stop", true); err != nil {
			return classify(err, "", "stop instance "+id)
		}
	}
	if in.Config[keyQuarantined] != "" {
		return nil
	}
	if err := p.c.patchConfig(ctx, id, map[string]string{keyQuarantined: muster.FormatQuarantineTag(since)}); err != nil {
		return classify(err, "", "mark instance "+id)
	}
	p.log.Info("instance quarantined", "instance", id)
	return nil
}

// Restore starts a quarantined instance again and unsets its mark.
func (p *Provider) Restore(ctx context.Context, id string) error {
	in, err := p.ownInstance(ctx, id)
	if err != nil {
		return err
	}
	if strings.EqualFold(in.Status, "Stopped") {
		if err := p.c.SetState(ctx, id, "start", false); err != nil {
			return classify(err, "", "start instance "+id)
		}
	}
	// An empty value unsets a key in a PATCH.
	if err := p.c.patchConfig(ctx, id, map[string]string{keyQuarantined: ""}); err != nil {
		return classify(err, "", "unmark instance "+id)
	}
	p.log.Info("instance restored", "instance", id)
	return nil
}

// ownInstance returns one of the model's instances; ENotFound for any
// other (H7).
func (p *Provider) ownInstance(ctx context.Context, id string) (Instance, error) {
	in, err := p.c.Instance(ctx, id)
	if err != nil && !IsNotFound(err) {
		return Instance{}, classify(err, "", "read instance "+id)
	}
	if err != nil || !p.isOwn(in.Config) {
		return Instance{}, muster.Errorf(muster.ENotFound, "lxd: instance %s not found in this model", id)
	}
	return in, nil
}

// patchConfig merges config keys into an instance's config.
func (c *Client) patchConfig(ctx context.Context, name string, config map[string]string) error {
	_, err := c.call(ctx, http.MethodPatch, "/1.0/instances/"+url.PathEscape(name), map[string]any{"config": config})
	return err
}
