package sim

import (
	"time"

	"github.com/musterhq/muster"
)

// Call kinds, the keys of Faults.Latency, Faults.RateLimits, Faults.ErrorRate
// and Stats.Calls. A batch start is one CallStart.
const (
	CallStart       = "start"
	CallStop        = "stop"
	CallList        = "list"
	CallZones       = "zones"
	CallSubnets     = "subnets"
	CallDeriveZones = "derive-zones"
	// CallDescribe is the EC2 API's DescribeImages, DescribeInstanceTypes
	// and DescribeInstanceAttribute (the other EC2 actions count as the
	// sim call of the same meaning: RunInstances as CallStart, ...).
	CallDescribe = "describe"
	// CallModify is the EC2 API's StopInstances, StartInstances,
	// CreateTags and DeleteTags.
	CallModify = "modify"
)

// CallKinds lists every call kind.
var CallKinds = []string{CallStart, CallStop, CallList, CallZones, CallSubnets, CallDeriveZones, CallDescribe, CallModify}

// Unlimited is the zone capacity that never runs out.
const Unlimited = -1

// DefaultMaxBatch is the default largest batch of one StartInstances call.
const DefaultMaxBatch = 100

// DefaultRootDisk is the root disk of an instance whose constraints ask for
// none or less, in MiB.
const DefaultRootDisk = 8 << 10

// ZoneConfig configures one zone.
type ZoneConfig struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	// Capacity is the number of cores the zone can run; Unlimited (-1)
	// means no limit, 0 means nothing fits.
	Capacity int `json:"capacity"`
}

// ZoneState is a zone as the admin interface shows it.
type ZoneState struct {
	Name      string  `json:"name"`
	Available bool    `json:"available"`
	Capacity  int     `json:"capacity"`   // cores; Unlimited (-1) means no limit
	Used      int     `json:"used"`       // cores of the zone's current instances
	Instances int     `json:"instances"`  // current instances in the zone
	Index     int     `json:"index"`      // position; the zone's subnets are 10.<Index+1>.x.x
	FailNext  int     `json:"fail-next"`  // starts still to fail with a capacity error
	ErrorRate float64 `json:"error-rate"` // probability that a start in the zone fails
}

// ZoneUpdate changes a zone; nil fields are left alone. Setting a zone that
// does not exist adds it (available, unlimited unless set).
type ZoneUpdate struct {
	Available *bool `json:"available,omitempty"`
	Capacity  *int  `json:"capacity,omitempty"`
}

// SpaceConfig is a network space: the sim gives every zone listed (all zones
// when Zones is empty) one subnet in the space.
type SpaceConfig struct {
	Name  string   `json:"name"`
	Zones []string `json:"zones,omitempty"`
}

// DefaultSpaces are the spaces of a Config without any: alpha and beta, each
// with a subnet in every zone.
var DefaultSpaces = []SpaceConfig{{Name: "alpha"}, {Name: "beta"}}

// Latency is the time one call takes: Fixed plus a uniformly random part
// of up to Jitter.
type Latency struct {
	Fixed  time.Duration `json:"fixed"`  // nanoseconds in JSON
	Jitter time.Duration `json:"jitter"` // nanoseconds in JSON
}

// Bucket is a token bucket: Burst tokens at most, refilled at PerSecond
// tokens a second. A Burst of 0 means no limit.
type Bucket struct {
	Burst     int     `json:"burst"`
	PerSecond float64 `json:"per-second"`
}

// Faults is everything scriptable about the cloud's misbehaviour. The zero
// value is a perfect, infinitely fast cloud.
type Faults struct {
	// Latency per call kind (CallStart, ...).
	Latency map[string]Latency `json:"latency,omitempty"`
	// RateLimits is a request bucket per call kind; a call that finds its
	// bucket empty fails at once with ErrThrottled.
	RateLimits map[string]Bucket `json:"rate-limits,omitempty"`
	// InstanceRate is a bucket counting started instances (EC2's resource
	// rate limit): a start call that needs more tokens than the bucket holds
	// fails with ErrThrottled.
	InstanceRate Bucket `json:"instance-rate"`
	// ErrorRate is the probability (0..1) that a call of a kind fails with
	// ErrUnavailable.
	ErrorRate map[string]float64 `json:"error-rate,omitempty"`
	// ZoneErrorRate is the probability (0..1) that a start in a zone fails
	// with ErrUnavailable (zone set).
	ZoneErrorRate map[string]float64 `json:"zone-error-rate,omitempty"`
	// FailNext makes the next N starts in a zone fail with ErrCapacity.
	FailNext map[string]int `json:"fail-next,omitempty"`
	// ListingLag is how long a new instance stays out of Instances().
	ListingLag time.Duration `json:"listing-lag"` // nanoseconds in JSON
	// ReplyDelay holds the reply of a call of a kind this long after the
	// call has done its work (a slow network after the cloud acted).
	ReplyDelay map[string]Latency `json:"reply-delay,omitempty"`
	// LoseReplies makes the next N calls of a kind do their work and then
	// lose the reply: over HTTP the connection is closed without a
	// response, in-process the call fails with ErrUnavailable.
	LoseReplies map[string]int `json:"lose-replies,omitempty"`
	// QuotaVCPUs is the region's vCPU quota: a start that would take the
	// cores of all live instances above it fails with ErrQuota (EC2's
	// VcpuLimitExceeded) in every zone. 0 = no quota.
	QuotaVCPUs int `json:"quota-vcpus,omitempty"`
	// AgentBootFailureRate is the probability (0..1) that the simulated
	// agent of an instance never boots, so its machine never reports
	// started (R1). It is drawn when the agent would boot.
	AgentBootFailureRate float64 `json:"agent-boot-failure-rate,omitempty"`
}

// Instance is an instance as the cloud keeps it.
type Instance struct {
	ID           string                    `json:"id"`
	Zone         string                    `json:"zone"`
	InstanceType string                    `json:"instance-type"`
	Arch         string                    `json:"arch"`
	Cores        int                       `json:"cores"`
	Mem          uint64                    `json:"mem"`       // MiB
	RootDisk     uint64                    `json:"root-disk"` // MiB
	Base         string                    `json:"base,omitempty"`
	Tags         map[string]string         `json:"tags,omitempty"`
	Addresses    []string                  `json:"addresses,omitempty"`
	Volumes      []muster.Volume           `json:"volumes,omitempty"`
	Attachments  []muster.VolumeAttachment `json:"attachments,omitempty"`
	Created      time.Time                 `json:"created"`
	// State is "running", or for instances of the EC2 API also
	// "pending", "stopping" or "stopped"; a terminated instance is gone
	// (the EC2 API lists it as "terminated" for a while).
	State string `json:"state"`
	// Until is when a "pending" state becomes "running" and a
	// "stopping" one "stopped" (on the cloud's clock).
	Until time.Time `json:"until,omitzero"`
	// EC2 holds the attributes of an instance started through the EC2
	// API; nil for the others (the EC2 API derives theirs).
	EC2 *EC2Attrs `json:"ec2,omitempty"`
}

// EC2Attrs are what the EC2 API keeps about an instance it started.
type EC2Attrs struct {
	ImageID       string `json:"image-id"`
	SubnetID      string `json:"subnet-id"`
	ReservationID string `json:"reservation-id"`
	LaunchIndex   int    `json:"launch-index"`
	ClientToken   string `json:"client-token,omitempty"`
	RootVolumeID  string `json:"root-volume-id"`
	// KeepVolumes are the device names whose volume is not deleted on
	// termination (DeleteOnTermination=false).
	KeepVolumes []string `json:"keep-volumes,omitempty"`
}

// Controller returns the controller tag of i.
func (i Instance) Controller() string { return i.Tags[muster.TagController] }

// Model returns the model tag of i.
func (i Instance) Model() string { return i.Tags[muster.TagModel] }

// Provider converts i into the form a provider lists.
func (i Instance) Provider() muster.Instance {
	return muster.Instance{
		ID:          i.ID,
		Zone:        i.Zone,
		Tags:        copyTags(i.Tags),
		MachineID:   i.Tags[muster.TagMachine],
		LaunchToken: i.Tags[muster.TagLaunchToken],
		Created:     i.Created,
		State:       i.State,
	}
}

// Hardware returns what i turned out to be.
func (i Instance) Hardware() muster.Hardware {
	return muster.Hardware{Arch: i.Arch, Cores: uint64(i.Cores), Mem: i.Mem, RootDisk: i.RootDisk, AvailabilityZone: i.Zone}
}

// Result returns the start result for i.
func (i Instance) Result() muster.StartResult {
	return muster.StartResult{
		Instance:    i.Provider(),
		DisplayName: i.ID + " (" + i.InstanceType + ")",
		Hardware:    i.Hardware(),
		Addresses:   append([]string(nil), i.Addresses...),
		Volumes:     append([]muster.Volume(nil), i.Volumes...),
		Attachments: append([]muster.VolumeAttachment(nil), i.Attachments...),
	}
}

// NewInstance describes an instance added by the admin interface, one that
// no machine launched (or one of another controller or model).
type NewInstance struct {
	Zone         string            `json:"zone"`
	Controller   string            `json:"controller"`
	Model        string            `json:"model"`
	MachineID    string            `json:"machine,omitempty"`
	LaunchToken  string            `json:"launch-token,omitempty"`
	Tags         map[string]string `json:"tags,omitempty"`
	InstanceType string            `json:"instance-type,omitempty"` // default s1.small
}

// Stats is a snapshot of the cloud's counters.
type Stats struct {
	Calls            map[string]int64 `json:"calls"`     // by call kind
	Throttled        map[string]int64 `json:"throttled"` // by call kind
	Errors           map[string]int64 `json:"errors"`    // failed calls and failed starts, by call kind
	InstancesStarted int64            `json:"instances-started"`
	InstancesStopped int64            `json:"instances-stopped"`
	Instances        int              `json:"instances"` // current
	InstancesByZone  map[string]int   `json:"instances-by-zone"`
}

// InstanceType is a shape of instance the sim offers.
type InstanceType struct {
	Name  string `json:"name"`
	Arch  string `json:"arch"`
	Cores int    `json:"cores"`
	Mem   uint64 `json:"mem"` // MiB
}

// InstanceTypes are the sim's instance types, smallest first.
var InstanceTypes = func() []InstanceType {
	var out []InstanceType
	for _, arch := range []string{"amd64", "arm64"} {
		out = append(out,
			InstanceType{"s1.small", arch, 1, 2 << 10},
			InstanceType{"s1.medium", arch, 2, 4 << 10},
			InstanceType{"s1.large", arch, 4, 16 << 10},
			InstanceType{"s1.xlarge", arch, 8, 32 << 10},
		)
	}
	return out
}()

// Bases are the bases the sim has images for (for amd64 and arm64).
var Bases = []string{"ubuntu@22.04", "ubuntu@24.04"}

func copyTags(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ZoneConfigs returns available zones of Unlimited capacity with the names
// given, for Config.Zones.
func ZoneConfigs(names ...string) []ZoneConfig {
	out := make([]ZoneConfig, 0, len(names))
	for _, n := range names {
		out = append(out, ZoneConfig{Name: n, Available: true, Capacity: Unlimited})
	}
	return out
}

// The key pair the sim's EC2 endpoint (sim/ec2api, served by `muster sim
// serve`) accepts by default.
const (
	DefaultEC2AccessKey = "AKIAMUSTERSIMULATOR0"
	DefaultEC2SecretKey = "muster-sim-secret-access-key"
)
