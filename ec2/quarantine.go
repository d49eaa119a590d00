package ec2

import (
	"context"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/musterhq/muster"
)

var _ muster.Quarantiner = (*Provider)(nil)

// Quarantine stops (StopInstances, not TerminateInstances) one of the
// model's instances and tags it muster-quarantined (R6). An instance that
// carries the tag already keeps its first time.
func (p *Provider) Quarantine(ctx context.Context, id string, since time.Time) error {
	in, err := p.ownInstance(ctx, id)
	if err != nil {
		return err
	}
	if _, err := p.client.StopInstances(ctx, &ec2.StopInstancesInput{InstanceIds: []string{id}}); err != nil {
		return classify(err, "StopInstances", "")
	}
	if _, marked := muster.QuarantinedSince(in); marked {
		return nil
	}
	_, err = p.client.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id},
		Tags: []types.Tag{{Key: aws.String(muster.TagQuarantined), Value: aws.String(muster.FormatQuarantineTag(since))}}})
	if err != nil {
		return classify(err, "CreateTags", "")
	}
	p.log.Info("instance quarantined", "instance", id)
	return nil
}

// Restore starts a quarantined instance again and deletes its tag.
func (p *Provider) Restore(ctx context.Context, id string) error {
	if _, err := p.ownInstance(ctx, id); err != nil {
		return err
	}
	if _, err := p.client.StartInstances(ctx, &ec2.StartInstancesInput{InstanceIds: []string{id}}); err != nil {
		return classify(err, "StartInstances", "")
	}
	_, err := p.client.DeleteTags(ctx, &ec2.DeleteTagsInput{Resources: []string{id},
		Tags: []types.Tag{{Key: aws.String(muster.TagQuarantined)}}})
	if err != nil {
		return classify(err, "DeleteTags", "")
	}
	p.log.Info("instance restored", "instance", id)
	return nil
}

// ownInstance describes one of the model's live instances; ENotFound for
// any other id (H7).
func (p *Provider) ownInstance(ctx context.Context, id string) (muster.Instance, error) {
	var found *muster.Instance
	if plausibleID(id) {
		filters := append(p.ownFilters(),
			types.Filter{Name: aws.String("instance-id"), Values: []string{id}},
			types.Filter{Name: aws.String("instance-state-name"), Values: liveStates})
		err := p.describeOwn(ctx, filters, func(r types.Reservation) {
			for _, inst := range r.Instances {
				if in := p.instance(inst); in.ID == id && p.isOwn(in.Tags) {
					found = &in
				}
			}
		})
		if err != nil {
			return muster.Instance{}, err
		}
	}
	if found == nil {
		return muster.Instance{}, muster.Errorf(muster.ENotFound, "ec2: instance %s not found in this model", id)
	}
	return *found, nil
}
