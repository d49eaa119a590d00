// Package sim is muster's simulated cloud (SPEC §3.1): a cloud model with
// zones, capacity, instance types, images, subnets, spaces, volumes,
// latency, rate limits, fault injection and listing lag; a muster.Provider
// on it, in-process (Cloud.Provider) or over HTTP (NewServer, NewClient,
// Client.Provider); and the admin calls `muster sim` commands use.
//
// How the sim classifies failures:
//   - unknown base, unsupported arch, no instance type fitting the
//     constraints, an oversized batch, a bad or unknown placement zone in
//     DeriveZones: ErrZoneIndependent;
//   - a zone without room for the instance's cores, an unavailable zone,
//     and each start consumed by Faults.FailNext: ErrCapacity with Zone set
//     (an unavailable zone counts as capacity, so that capacity memory keeps
//     the provisioner away from it);
//   - a start in a zone that does not exist, a start in a zone without a
//     subnet of a requested space, and an injected zone fault
//     (Faults.ZoneErrorRate): ErrUnavailable with Zone set;
//   - an injected call fault (Faults.ErrorRate): ErrUnavailable, no zone;
//   - an empty request or instance bucket: ErrThrottled, at once (the call
//     does not wait for tokens).
//
// Zone capacity is counted in cores; Unlimited (-1) never runs out, 0 fits
// nothing. Stopping an instance frees its cores. The i-th zone (from 0)
// has, for the j-th space that includes it, a subnet "subnet-ZONE-SPACE"
// with CIDR 10.<i+1>.<16j>.0/20 (a zone in no space gets "subnet-ZONE",
// 10.<i+1>.0.0/20); an instance gets one address per requested space, or
// one in its zone's first subnet.
//
// A start repeated with the same launch token, controller and model
// returns the first instance while it runs, starting nothing and using no
// capacity. A Provider sees, and stops, only instances tagged with its
// controller and model.
//
// NewServer also serves a subset of the EC2 Query API at POST / and /ec2/
// (DescribeAvailabilityZones, DescribeSubnets, DescribeImages,
// DescribeInstanceTypes, RunInstances, DescribeInstances,
// TerminateInstances, DescribeInstanceAttribute), SigV4-verified with
// Config.EC2AccessKey/EC2SecretKey, so that the AWS SDK for Go v2 and the
// ec2 provider run against the sim. It is the same cloud: its calls count,
// wait, fail and are limited under the sim's call kinds, and its instances
// are the ones a Provider sees. Failures map to EC2's codes: throttled →
// RequestLimitExceeded (503), capacity → InsufficientInstanceCapacity
// (500), an injected call fault → InternalError (500), a zone fault →
// Unavailable (503), bad input → InvalidParameterValue and the other
// Invalid* codes (400). EC2 lists terminated instances (of either API) as
// terminated for TombstoneTTL, and a RunInstances client token returns its
// reservation for the cloud's lifetime.
package sim
