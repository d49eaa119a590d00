"""Drives the muster sim's EC2 API with boto3, as a user's script would.

Usage: python3 boto3_check.py ENDPOINT_URL
Credentials and region come from the environment. Exits non-zero, with a
message, at the first thing that is not as EC2 would have it.
"""
import sys

import boto3
import botocore.exceptions

endpoint = sys.argv[1]
ec2 = boto3.client("ec2", endpoint_url=endpoint)
res = boto3.resource("ec2", endpoint_url=endpoint)


def check(ok, what):
    if not ok:
        sys.exit("boto3 check failed: " + what)


def error_code(call, **kw):
    try:
        call(**kw)
    except botocore.exceptions.ClientError as e:
        return e.response["Error"]["Code"]
    return None


images = ec2.describe_images(Owners=["099720109477"], Filters=[{"Name": "architecture", "Values": ["arm64"]}])["Images"]
check(len(images) == 2, "describe_images arm64: %r" % images)
image = sorted(images, key=lambda i: i["Name"])[-1]["ImageId"]
zones = [z["ZoneName"] for z in ec2.describe_availability_zones()["AvailabilityZones"]]
check(len(zones) == 2, "zones %r" % zones)

# Paginators page through the sim's page tokens.
subnets = [s for page in ec2.get_paginator("describe_subnets").paginate(PaginationConfig={"PageSize": 5}) for s in page["Subnets"]]
check(len(subnets) == 4, "describe_subnets paginated: %d subnets" % len(subnets))

run = dict(ImageId=image, InstanceType="s1.medium", MinCount=3, MaxCount=3, ClientToken="boto-1",
           Placement={"AvailabilityZone": zones[0]},
           TagSpecifications=[{"ResourceType": "instance", "Tags": [{"Key": "app", "Value": "web"}]}])
out = ec2.run_instances(**run)
ids = [i["InstanceId"] for i in out["Instances"]]
check(len(ids) == 3 and all(i["State"]["Name"] == "pending" for i in out["Instances"]), "run_instances: %r" % out["Instances"])
check(all(len(i) == 19 and i.startswith("i-") for i in ids), "instance ids %r" % ids)
check(ec2.run_instances(**run)["ReservationId"] == out["ReservationId"], "client token not idempotent")
run["InstanceType"] = "s1.large"
check(error_code(ec2.run_instances, **run) == "IdempotentParameterMismatch", "client token reused with another type")

ec2.get_waiter("instance_running").wait(InstanceIds=ids, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
ec2.get_waiter("instance_status_ok").wait(InstanceIds=ids, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
statuses = ec2.describe_instance_status(InstanceIds=ids)["InstanceStatuses"]
check(sorted(s["InstanceId"] for s in statuses) == sorted(ids) and all(s["InstanceStatus"]["Status"] == "ok" for s in statuses),
      "describe_instance_status: %r" % statuses)

# The resource API: filters, tags, stop and start.
web = list(res.instances.filter(Filters=[{"Name": "tag:app", "Values": ["web"]}, {"Name": "instance-state-name", "Values": ["running"]}]))
check(sorted(i.id for i in web) == sorted(ids), "instances.filter tag:app=web: %r" % web)
inst = res.Instance(ids[0])
inst.create_tags(Tags=[{"Key": "Name", "Value": "first"}])
inst.reload()
check({t["Key"]: t["Value"] for t in inst.tags} == {"app": "web", "Name": "first"}, "tags after create_tags: %r" % inst.tags)
check(inst.instance_type == "s1.medium" and inst.placement["AvailabilityZone"] == zones[0], "instance %r" % inst)
tags = [t for page in ec2.get_paginator("describe_tags").paginate(Filters=[{"Name": "key", "Values": ["app"]}], PaginationConfig={"PageSize": 5}) for t in page["Tags"]]
check(len(tags) == 3, "describe_tags key=app paginated: %r" % tags)
ec2.delete_tags(Resources=[ids[1]], Tags=[{"Key": "app", "Value": "not-web"}])
check(len(ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": [ids[1]]}])["Tags"]) == 1, "delete_tags with another value deleted the tag")
ec2.delete_tags(Resources=[ids[1]], Tags=[{"Key": "app"}])
check(ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": [ids[1]]}])["Tags"] == [], "delete_tags left a tag")

inst.stop()
inst.wait_until_stopped(WaiterConfig={"Delay": 1, "MaxAttempts": 30})
check(inst.state["Name"] == "stopped" and inst.state["Code"] == 80, "state after stop: %r" % inst.state)
check(error_code(ec2.describe_instance_status, InstanceIds=[ids[0]]) is None, "describe_instance_status of a stopped instance failed")
check(ec2.describe_instance_status(InstanceIds=[ids[0]])["InstanceStatuses"] == [], "a stopped instance has a status without IncludeAllInstances")
inst.start()
inst.wait_until_running(WaiterConfig={"Delay": 1, "MaxAttempts": 30})

attr = ec2.describe_instance_attribute(InstanceId=ids[0], Attribute="disableApiTermination")
check(attr["DisableApiTermination"]["Value"] is False, "disableApiTermination %r" % attr)
vols = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [ids[0]]}])["Volumes"]
check(len(vols) == 1 and vols[0]["Attachments"][0]["Device"] == "/dev/sda1", "describe_volumes %r" % vols)
check(error_code(ec2.describe_instances, Filters=[{"Name": "no-such-filter", "Values": ["x"]}]) == "InvalidParameterValue", "unknown filter accepted")

ec2.terminate_instances(InstanceIds=ids)
ec2.get_waiter("instance_terminated").wait(InstanceIds=ids, WaiterConfig={"Delay": 1, "MaxAttempts": 30})
left = ec2.describe_instances(Filters=[{"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "stopped"]}])
check(left["Reservations"] == [], "live instances after terminate: %r" % left)
print("boto3 check passed")
