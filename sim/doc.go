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
// has, for the j-th space that includes it, a subnet SubnetID(ZONE, SPACE)
// with CIDR 10.<i+1>.<16j>.0/20 (a zone in no space gets SubnetID(ZONE, ""),
// 10.<i+1>.0.0/20); an instance gets one address per requested space, or
// one in its zone's first subnet.
//
// A start repeated with the same launch token, controller and model
// returns the first instance while it runs, starting nothing and using no
// capacity. A Provider sees, and stops, only instances tagged with its
// controller and model.
//
// The EC2 Query API on a cloud is package sim/ec2api, built on the
// cloud's front-end calls (Do, Launch, Terminate, Listed, Subnets, ...);
// sim/simserver serves both APIs as `muster sim serve` does.
package sim
