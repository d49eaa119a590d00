package ec2api

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/musterhq/muster/sim"
)

// The actions beyond what muster's ec2 provider uses, for the AWS CLI,
// boto3 and Terraform: Stop/StartInstances, tags, instance status, VPCs,
// regions and volumes.

// ---- StopInstances, StartInstances

func (a *API) stopInstances(q *query) (any, error) {
	changes, err := a.power(q, false)
	if err != nil {
		return nil, err
	}
	return &stopInstancesResponse{RequestID: q.requestID, Instances: changes}, nil
}

func (a *API) startInstances(q *query) (any, error) {
	changes, err := a.power(q, true)
	if err != nil {
		return nil, err
	}
	return &startInstancesResponse{RequestID: q.requestID, Instances: changes}, nil
}

func (a *API) power(q *query, on bool) ([]xmlStateChange, error) {
	ids, err := list(q.form, "InstanceId")
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, missingParam("InstanceId")
	}
	if err := checkInstanceIDs(ids); err != nil {
		return nil, err
	}
	if _, err := boolParam(q.form, "Force", false); err != nil {
		return nil, err
	}
	if _, err := boolParam(q.form, "Hibernate", false); err != nil {
		return nil, err
	}
	if q.form.Get("Hibernate") == "true" {
		return nil, unsupported("Hibernate")
	}
	changes, unknown, err := a.c.Power(ids, on)
	var se *sim.StateError
	switch {
	case len(unknown) > 0:
		return nil, notFoundIDs("InvalidInstanceID.NotFound", "instance", unknown)
	case errors.As(err, &se):
		return nil, newError(http.StatusBadRequest, "IncorrectInstanceState", "The instance '%s' is not in a state from which it can be %s.", se.ID, map[bool]string{true: "started", false: "stopped"}[on])
	case err != nil:
		return nil, err
	}
	var out []xmlStateChange
	for _, ch := range changes {
		if ch.Previous == "terminated" {
			return nil, newError(http.StatusBadRequest, "IncorrectInstanceState", "The instance '%s' is not in a state from which it can be %s.", ch.ID, map[bool]string{true: "started", false: "stopped"}[on])
		}
		out = append(out, xmlStateChange{InstanceID: ch.ID, CurrentState: ec2State(ch.Current), PreviousState: ec2State(ch.Previous)})
	}
	return out, nil
}

// unsupported is the error of a parameter EC2 has and the sim does not
// simulate: the caller must not get something other than it asked for.
func unsupported(param string) *apiError {
	return newError(http.StatusBadRequest, "Unsupported", "The parameter %s is not supported by the muster sim", truncate(param, 64))
}

// ---- CreateTags, DeleteTags, DescribeTags

// tagRequest is the resources and tags of a CreateTags or DeleteTags.
func tagRequest(q *query, needValue bool) (ids []string, tags []xmlTag, hasValue []bool, err error) {
	if ids, err = list(q.form, "ResourceId"); err != nil {
		return nil, nil, nil, err
	}
	if len(ids) == 0 {
		return nil, nil, nil, missingParam("ResourceId")
	}
	for _, id := range ids {
		if !strings.HasPrefix(id, "i-") {
			return nil, nil, nil, newError(http.StatusBadRequest, "InvalidID", "The ID '%s' is not valid: the muster sim tags instances only", truncate(id, 64))
		}
	}
	if err := checkInstanceIDs(ids); err != nil {
		return nil, nil, nil, err
	}
	ns, err := indexes(q.form, "Tag")
	if err != nil {
		return nil, nil, nil, err
	}
	for _, n := range ns {
		p := "Tag." + strconv.Itoa(n)
		k := q.form.Get(p + ".Key")
		_, has := q.form[p+".Value"]
		switch {
		case k == "":
			return nil, nil, nil, missingParam(p + ".Key")
		case needValue && !has:
			return nil, nil, nil, missingParam(p + ".Value")
		case len(k) > 128 || len(q.form.Get(p+".Value")) > 256:
			return nil, nil, nil, invalidValue("Tag %s: keys are at most 128 and values at most 256 characters", truncate(k, 64))
		case strings.HasPrefix(strings.ToLower(k), "aws:"):
			return nil, nil, nil, invalidValue("Tag keys starting with 'aws:' are reserved for internal use")
		}
		tags = append(tags, xmlTag{Key: k, Value: q.form.Get(p + ".Value")})
		hasValue = append(hasValue, has)
	}
	if needValue && len(tags) == 0 {
		return nil, nil, nil, missingParam("Tag")
	}
	return ids, tags, hasValue, nil
}

func (a *API) createTags(q *query) (any, error) {
	ids, tags, _, err := tagRequest(q, true)
	if err != nil {
		return nil, err
	}
	var tooMany bool
	unknown := a.c.UpdateTags(ids, func(m map[string]string) {
		n := len(m)
		for _, t := range tags {
			if _, ok := m[t.Key]; !ok {
				n++
			}
		}
		if n > maxTags {
			tooMany = true
			return
		}
		for _, t := range tags {
			m[t.Key] = t.Value
		}
	})
	if len(unknown) > 0 {
		return nil, notFoundIDs("InvalidInstanceID.NotFound", "instance", unknown)
	}
	if tooMany {
		return nil, newError(http.StatusBadRequest, "TagLimitExceeded", "The maximum number of tags (%d) for a resource has been reached", maxTags)
	}
	return &createTagsResponse{RequestID: q.requestID, Return: true}, nil
}

func (a *API) deleteTags(q *query) (any, error) {
	ids, tags, hasValue, err := tagRequest(q, false)
	if err != nil {
		return nil, err
	}
	unknown := a.c.UpdateTags(ids, func(m map[string]string) {
		if len(tags) == 0 {
			clear(m)
		}
		for i, t := range tags {
			if v, ok := m[t.Key]; ok && (!hasValue[i] || v == t.Value) {
				delete(m, t.Key)
			}
		}
	})
	if len(unknown) > 0 {
		return nil, notFoundIDs("InvalidInstanceID.NotFound", "instance", unknown)
	}
	return &deleteTagsResponse{RequestID: q.requestID, Return: true}, nil
}

func (a *API) describeTags(q *query) (any, error) {
	insts, _ := a.instances()
	var all []xmlResourceTag
	for _, inst := range insts {
		if inst.State == "terminated" {
			continue
		}
		for _, t := range sortedTags(inst.Tags) {
			all = append(all, xmlResourceTag{ResourceID: inst.ID, ResourceType: "instance", Key: t.Key, Value: t.Value})
		}
	}
	slices.SortFunc(all, func(x, y xmlResourceTag) int {
		return strings.Compare(x.ResourceID+"\x00"+x.Key, y.ResourceID+"\x00"+y.Key)
	})
	page, next, err := describe(q, all, paging{minMax: 5, maxMax: 1000}, func(t xmlResourceTag) row {
		return row{key: t.ResourceID + "\x00" + t.Key, fields: map[string][]string{
			"key":           {t.Key},
			"value":         {t.Value},
			"resource-id":   {t.ResourceID},
			"resource-type": {t.ResourceType},
		}}
	})
	if err != nil {
		return nil, err
	}
	return &describeTagsResponse{RequestID: q.requestID, Tags: nonNil(page), NextToken: next}, nil
}

// ---- DescribeInstanceStatus

func (a *API) describeInstanceStatus(q *query) (any, error) {
	ids, err := list(q.form, "InstanceId")
	if err != nil {
		return nil, err
	}
	if err := checkInstanceIDs(ids); err != nil {
		return nil, err
	}
	includeAll, err := boolParam(q.form, "IncludeAllInstances", false)
	if err != nil {
		return nil, err
	}
	insts, _ := a.instances()
	var unknown []string
	for _, id := range ids {
		if !slices.ContainsFunc(insts, func(inst instance) bool { return inst.ID == id }) && !slices.Contains(unknown, id) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return nil, notFoundIDs("InvalidInstanceID.NotFound", "instance", unknown)
	}
	insts = slices.DeleteFunc(insts, func(inst instance) bool {
		return len(ids) > 0 && !slices.Contains(ids, inst.ID) || !includeAll && inst.State != "running"
	})
	slices.SortFunc(insts, func(x, y instance) int { return strings.Compare(x.key(), y.key()) })
	page, next, err := describe(q, insts, paging{minMax: 5, maxMax: 1000}, func(inst instance) row {
		st := status(inst.State)
		return row{key: inst.key(), fields: map[string][]string{
			"availability-zone":      {inst.Zone},
			"instance-state-name":    {inst.State},
			"instance-state-code":    {strconv.Itoa(ec2State(inst.State).Code)},
			"instance-status.status": {st},
			"system-status.status":   {st},
		}}
	})
	if err != nil {
		return nil, err
	}
	resp := &describeInstanceStatusResponse{RequestID: q.requestID, Statuses: []xmlInstanceStatus{}, NextToken: next}
	for _, inst := range page {
		st := xmlStatus{Status: status(inst.State), Details: []xmlStatusDetail{{Name: "reachability", Status: "passed"}}}
		if st.Status != "ok" {
			st.Details[0].Status = "initializing"
		}
		resp.Statuses = append(resp.Statuses, xmlInstanceStatus{
			InstanceID: inst.ID, AvailabilityZone: inst.Zone, State: ec2State(inst.State), SystemStatus: st, InstanceStatus: st,
		})
	}
	return resp, nil
}

// status is the status checks' result of an instance in state: a running
// sim instance passes them at once.
func status(state string) string {
	switch state {
	case "running":
		return "ok"
	case "pending":
		return "initializing"
	}
	return "not-applicable"
}

// ---- DescribeVpcs

func (a *API) describeVpcs(q *query) (any, error) {
	ids, err := list(q.form, "VpcId")
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if id != vpcID {
			return nil, notFoundIDs("InvalidVpcID.NotFound", "vpc", []string{truncate(id, 64)})
		}
	}
	all := []xmlVpc{{VpcID: vpcID, OwnerID: ownerID, State: "available", CIDRBlock: "10.0.0.0/8", DhcpOptionsID: "dopt-0a1b2c3d4e5f60718",
		InstanceTenancy: "default", IsDefault: true, Tags: []xmlTag{}}}
	page, next, err := describe(q, all, paging{minMax: 5, maxMax: 1000, tagged: true}, func(v xmlVpc) row {
		return row{tags: tagMap(v.Tags), fields: map[string][]string{
			"vpc-id":     {v.VpcID},
			"state":      {v.State},
			"cidr":       {v.CIDRBlock},
			"cidr-block": {v.CIDRBlock},
			"is-default": {strconv.FormatBool(v.IsDefault)},
			"owner-id":   {v.OwnerID},
		}}
	})
	if err != nil {
		return nil, err
	}
	return &describeVpcsResponse{RequestID: q.requestID, Vpcs: nonNil(page), NextToken: next}, nil
}

// ---- DescribeRegions

// The sim serves one region: whichever the request is signed for.
func (a *API) describeRegions(q *query) (any, error) {
	names, err := list(q.form, "RegionName")
	if err != nil {
		return nil, err
	}
	if _, err := boolParam(q.form, "AllRegions", false); err != nil {
		return nil, err
	}
	for _, n := range names {
		if n != q.region {
			return nil, newError(http.StatusBadRequest, "InvalidParameterValue", "Invalid region: %s (the muster sim serves %s)", truncate(n, 64), q.region)
		}
	}
	all := []xmlRegion{{RegionName: q.region, RegionEndpoint: "ec2." + q.region + ".amazonaws.com", OptInStatus: "opt-in-not-required"}}
	page, _, err := describe(q, all, paging{}, func(r xmlRegion) row {
		return row{fields: map[string][]string{"region-name": {r.RegionName}, "endpoint": {r.RegionEndpoint}, "opt-in-status": {r.OptInStatus}}}
	})
	if err != nil {
		return nil, err
	}
	return &describeRegionsResponse{RequestID: q.requestID, Regions: nonNil(page)}, nil
}

// ---- DescribeVolumes

func (a *API) describeVolumes(q *query) (any, error) {
	ids, err := list(q.form, "VolumeId")
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if !strings.HasPrefix(id, "vol-") {
			return nil, newError(http.StatusBadRequest, "InvalidVolumeID.Malformed", "Invalid id: \"%s\" (expecting \"vol-...\")", truncate(id, 64))
		}
	}
	insts, _ := a.instances()
	var all []xmlVolume
	for _, inst := range insts {
		if inst.State == "terminated" {
			continue
		}
		created := inst.Created.UTC().Format(timeFormat)
		vol := func(id, device, typ string, mib uint64) xmlVolume {
			return xmlVolume{
				VolumeID: id, Size: (mib + 1023) >> 10, AvailabilityZone: inst.Zone, Status: "in-use", CreateTime: created, VolumeType: typ, Tags: []xmlTag{},
				Attachments: []xmlVolumeAttachment{{VolumeID: id, InstanceID: inst.ID, Device: device, Status: "attached", AttachTime: created,
					DeleteOnTermination: !slices.Contains(inst.a.KeepVolumes, device)}},
			}
		}
		all = append(all, vol(inst.a.RootVolumeID, rootDevice, "gp3", inst.RootDisk))
		for _, at := range inst.Attachments {
			for _, v := range inst.Volumes {
				if v.Name == at.Volume {
					typ := v.Pool
					if typ == "" {
						typ = "gp3"
					}
					all = append(all, vol(v.VolumeID, at.DeviceName, typ, v.Size))
				}
			}
		}
	}
	var unknown []string
	for _, id := range ids {
		if !slices.ContainsFunc(all, func(v xmlVolume) bool { return v.VolumeID == id }) {
			unknown = append(unknown, truncate(id, 64))
		}
	}
	if len(unknown) > 0 {
		return nil, newError(http.StatusBadRequest, "InvalidVolume.NotFound", "The volume '%s' does not exist.", strings.Join(unknown, ", "))
	}
	if len(ids) > 0 {
		all = slices.DeleteFunc(all, func(v xmlVolume) bool { return !slices.Contains(ids, v.VolumeID) })
	}
	volKey := func(v xmlVolume) string { return v.Attachments[0].InstanceID + "/" + v.Attachments[0].Device }
	slices.SortFunc(all, func(x, y xmlVolume) int { return strings.Compare(volKey(x), volKey(y)) })
	page, next, err := describe(q, all, paging{minMax: 5, maxMax: 500, tagged: true}, func(v xmlVolume) row {
		at := v.Attachments[0]
		return row{key: volKey(v), tags: tagMap(v.Tags), fields: map[string][]string{
			"volume-id":                        {v.VolumeID},
			"availability-zone":                {v.AvailabilityZone},
			"status":                           {v.Status},
			"volume-type":                      {v.VolumeType},
			"size":                             {strconv.FormatUint(v.Size, 10)},
			"attachment.instance-id":           {at.InstanceID},
			"attachment.device":                {at.Device},
			"attachment.status":                {at.Status},
			"attachment.delete-on-termination": {strconv.FormatBool(at.DeleteOnTermination)},
			"encrypted":                        {"false"},
		}}
	})
	if err != nil {
		return nil, err
	}
	return &describeVolumesResponse{RequestID: q.requestID, Volumes: nonNil(page), NextToken: next}, nil
}
