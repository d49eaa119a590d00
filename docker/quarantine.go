package docker

import (
	"context"
	"maps"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/musterhq/muster"
)

var _ muster.Quarantiner = (*Provider)(nil)

// A container's labels cannot change once it is created, so a quarantine
// (R6) is marked in its name: the container is stopped and renamed to
// "<name>.quarantined-<time>". The mark lives with the container on the
// engine, like a tag on a cloud: it survives a controller restart or a
// lost store, shows in `docker ps -a`, and keeps the container id (the
// instance id) unchanged. Instances turns it back into the
// muster-quarantined tag.
const quarantineSuffix = ".quarantined-"

// quarantineLayout is the time in a quarantined name (only characters a
// container name allows).
const quarantineLayout = "20060102T150405Z"

// Quarantine stops one of the model's containers and renames it with the
// quarantine mark; a container marked already keeps its first time.
func (p *Provider) Quarantine(ctx context.Context, id string, since time.Time) error {
	c, err := p.ownContainer(ctx, id)
	if err != nil {
		return err
	}
	if _, err := p.cli.ContainerStop(ctx, c.ID, client.ContainerStopOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
		return classify(err, "stop container "+id)
	}
	name := strings.TrimPrefix(c.Name, "/")
	if strings.Contains(name, quarantineSuffix) {
		return nil
	}
	newName := name + quarantineSuffix + since.UTC().Format(quarantineLayout)
	if _, err := p.cli.ContainerRename(ctx, c.ID, client.ContainerRenameOptions{NewName: newName}); err != nil {
		return classify(err, "rename container "+id)
	}
	p.log.Info("instance quarantined", "instance", c.ID, "name", newName)
	return nil
}

// Restore gives a quarantined container its name back and starts it.
func (p *Provider) Restore(ctx context.Context, id string) error {
	c, err := p.ownContainer(ctx, id)
	if err != nil {
		return err
	}
	name := strings.TrimPrefix(c.Name, "/")
	if base, _, ok := strings.Cut(name, quarantineSuffix); ok {
		if _, err := p.cli.ContainerRename(ctx, c.ID, client.ContainerRenameOptions{NewName: base}); err != nil {
			return classify(err, "rename container "+id)
		}
	}
	if _, err := p.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
		return classify(err, "start container "+id)
	}
	p.log.Info("instance restored", "instance", c.ID)
	return nil
}

// ownContainer inspects one of the model's containers by its id or
// name; ENotFound for any other (H7).
func (p *Provider) ownContainer(ctx context.Context, id string) (container.InspectResponse, error) {
	ins, err := p.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return container.InspectResponse{}, classify(err, "inspect container "+id)
	}
	c := ins.Container
	if err != nil || (c.ID != id && strings.TrimPrefix(c.Name, "/") != id) || c.Config == nil || !p.isOwn(c.Config.Labels) {
		return container.InspectResponse{}, muster.Errorf(muster.ENotFound, "docker: instance %s not found in this model", id)
	}
	return c, nil
}

// tagsOf returns a listed container's tags: its labels, plus the
// quarantine mark its name carries.
func tagsOf(labels map[string]string, names []string) map[string]string {
	for _, n := range names {
		_, at, ok := strings.Cut(strings.TrimPrefix(n, "/"), quarantineSuffix)
		if !ok {
			continue
		}
		t, err := time.Parse(quarantineLayout, at)
		if err != nil {
			continue
		}
		tags := maps.Clone(labels)
		tags[muster.TagQuarantined] = muster.FormatQuarantineTag(t)
		return tags
	}
	return labels
}
