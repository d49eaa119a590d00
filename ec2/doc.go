// Package ec2 is the muster provider on Amazon EC2 (SPEC §3.3), through the
// AWS SDK for Go v2. It also drives the sim's EC2-compatible endpoint
// (`muster sim serve`, http://ADDR/ec2/), which implements the same subset
// of the EC2 Query API (notes/EC2-CONTRACT.md).
//
// Configuration: the model config keys region (required), endpoint and
// profile (ApplyModelConfig). Credentials are never part of a model: they
// come from the standard AWS chain (environment, shared config and
// credentials files, the profile, SSO, an instance role through IMDS).
//
// How the contract maps onto EC2:
//
//   - StartInstance is one RunInstances with ClientToken = the launch token,
//     so a repeated start (a retry after a lost reply, or a controller that
//     crashed before recording) returns the first start's instance. The
//     instance and its volumes are tagged muster-controller, muster-model,
//     muster-machine, muster-launch-token, the start's tags and Name. The
//     zone is chosen through the subnet: a subnet of the first requested
//     space in the zone, else the zone's default subnet, else its first. The
//     instance type is the smallest current-generation type (cores, then
//     memory, then name) that fits the constraints and supports the arch
//     (DescribeInstanceTypes, listed once); the image is Canonical's newest
//     Ubuntu server image of the base and arch (DescribeImages, cached). The
//     root disk is gp3 of ceil(root-disk) GiB, at least 8; volumes are gp3
//     (or their pool's type: ebs, gp3, gp2, standard) on /dev/sdf, /dev/sdg,
//     …, deleted with the instance. After the first start a start costs
//     one call, RunInstances (the subnet list is kept for 5 minutes).
//   - The user data is cloud-init #cloud-config that writes the CA, the agent
//     config (StartParams.UserData, the JSON of muster.AgentConfig) and a
//     systemd unit, and runs a script that downloads the agent binary from
//     its catalogue URL with curl, checks its SHA-256, installs it and starts
//     the agent. A start whose UserData is empty gets no user data (an
//     instance without an agent).
//   - StartInstances (E3) starts the params of one shape with one
//     RunInstances of MinCount 1, MaxCount n, ClientToken "b-" + 62 hex
//     digits of the SHA-256 of the launch tokens. The instances share tags
//     (muster-batch = the ClientToken) and user data: each machine's id,
//     launch token and agent config sit in a file per launch index, and the
//     boot script keeps the one of the instance's ami-launch-index (IMDSv2)
//     and deletes the others. After the launch each instance is tagged
//     with its own machine, launch token and Name (one CreateTags an
//     instance: CreateTags gives all its resources one tag set). Until
//     those tags are there (a crash or a failed CreateTags came between),
//     Instances reads a batch instance's machine and launch token back
//     from its reservation's user data (one DescribeInstanceAttribute per
//     reservation, cached) and tags it, so a controller that restarts
//     right after RunInstances can still adopt it (C2).
//     MaxBatch is 32, which keeps the user data well under EC2's 16 KiB;
//     a batch that would not fit is split.
//   - Instances is DescribeInstances filtered by the controller and model
//     tags and the live states (pending, running, stopping, stopped),
//     following NextToken with MaxResults 1000.
//   - StopInstances terminates only instances that are this model's (H7):
//     the ones this provider started, and others only after a
//     DescribeInstances by instance id and the model's tags confirms them.
//     Ids EC2 says do not exist are dropped and the rest terminated.
//   - Zones is DescribeAvailabilityZones; Subnets is DescribeSubnets, the
//     space of a subnet being its muster-space tag; DeriveZones is the
//     placement zone (which must exist) intersected with the requested
//     spaces' zones.
//   - Errors are classified from EC2's codes: throttling → throttled;
//     Insufficient*Capacity → capacity in the zone; Invalid*, auth and
//     parameter errors → zone-independent; 5xx and connection errors →
//     unavailable. The SDK retries connection errors and InternalError and
//     Unavailable only; throttling and capacity errors come back at once,
//     for muster's own rate limiter and zone failover.
//
// IAM permissions the provider needs:
//
//	ec2:RunInstances
//	ec2:CreateTags (for the TagSpecifications of RunInstances, and a batch's per-instance tags)
//	ec2:DescribeInstances
//	ec2:DescribeInstanceAttribute
//	ec2:TerminateInstances
//	ec2:DescribeAvailabilityZones
//	ec2:DescribeSubnets
//	ec2:DescribeImages
//	ec2:DescribeInstanceTypes
//
// Security note: a batch's user data holds the agent passwords of all its
// machines, and user data is readable from inside each instance through
// the metadata service. Where that matters, start machines one by one
// (a provisioner without batching).
package ec2
