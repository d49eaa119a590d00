package muster

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Tag keys every provider puts on the instances it starts.
const (
	TagController  = "muster-controller"
	TagModel       = "muster-model"
	TagMachine     = "muster-machine"
	TagLaunchToken = "muster-launch-token"
)

// Provider talks to one kind of cloud for one model (SPEC §3). Methods are
// safe for concurrent use, honour ctx cancellation, and return
// *ProviderError for classified failures.
type Provider interface {
	// StartInstance starts one instance. A start repeated with the same
	// launch token returns the instance of the first.
	StartInstance(ctx context.Context, p StartParams) (StartResult, error)
	// StopInstances stops instances; unknown ids are not an error.
	StopInstances(ctx context.Context, ids ...string) error
	// Instances lists this model's instances only (tag-filtered, H7).
	Instances(ctx context.Context) ([]Instance, error)
	// Zones lists the provider's zones; empty for a provider without zones.
	Zones(ctx context.Context) ([]Zone, error)
	// DeriveZones returns the zones that p's placement and volumes allow;
	// empty means any.
	DeriveZones(ctx context.Context, p StartParams) ([]string, error)
}

// BatchStarter is offered by providers that can start many like instances
// in one call (E3). The results are in the order of ps; one failed start
// does not fail the others.
type BatchStarter interface {
	StartInstances(ctx context.Context, ps []StartParams) []StartOutcome
	// MaxBatch is the largest batch one call may carry.
	MaxBatch() int
}

// StartOutcome is the outcome of one start of a batch.
type StartOutcome struct {
	Result StartResult
	Err    error
}

// Networking is offered by providers that have subnets and spaces.
type Networking interface {
	Subnets(ctx context.Context) ([]Subnet, error)
}

// Subnet is a provider subnet in one zone, part of at most one space.
type Subnet struct {
	ID    string
	CIDR  string
	Zone  string
	Space string
}

// AgentBinary is one entry of the agent binary catalogue.
type AgentBinary struct {
	Version string
	OS      string // "linux"
	Arch    string // "amd64"
	SHA256  string
	Size    int64
	URL     string // where an instance can download it
	Path    string // local file, for providers on this host
}

// AgentBinaryFinder finds agent binaries. ENotFound when none match.
type AgentBinaryFinder interface {
	FindAgentBinaries(ctx context.Context, version, os, arch string) ([]AgentBinary, error)
}

// StartParams is everything a provider needs to start one instance (P8).
type StartParams struct {
	ControllerUUID string
	ModelUUID      string
	MachineID      string
	Zone           string // chosen zone; "" lets the provider choose (Z5)
	Constraints    Constraints
	Base           string
	Arch           string
	Placement      string
	Nonce          string
	LaunchToken    string
	Tags           map[string]string
	Password       string // the agent's password, in clear, for its config only
	AgentBinaries  []AgentBinary
	Volumes        []Volume
	Attachments    []VolumeAttachment
	// SubnetsToZones holds one map per requested space, in space-name
	// order: subnet id → zones.
	SubnetsToZones []map[string][]string
	UserData       []byte
}

// StartResult is what a provider returns for a started instance.
type StartResult struct {
	Instance    Instance
	DisplayName string
	Hardware    Hardware
	Addresses   []string
	Volumes     []Volume
	Attachments []VolumeAttachment
}

// Info converts r into the record kept for the machine.
func (r StartResult) Info() InstanceInfo {
	return InstanceInfo{
		InstanceID:  r.Instance.ID,
		DisplayName: r.DisplayName,
		Zone:        r.Instance.Zone,
		Hardware:    r.Hardware,
		Addresses:   r.Addresses,
		Volumes:     r.Volumes,
		Attachments: r.Attachments,
	}
}

// Instance is an instance as a provider lists it.
type Instance struct {
	ID          string
	Zone        string
	Tags        map[string]string
	MachineID   string // from the machine tag; "" for an instance no machine launched
	LaunchToken string
	Created     time.Time
	State       string // "pending", "running", "stopping", ...
}

// Zone is an availability zone.
type Zone struct {
	Name      string
	Available bool
}

// ProviderErrorKind classifies provider failures.
type ProviderErrorKind int

const (
	// ErrZoneIndependent: no zone would help (bad constraints, no image, auth).
	ErrZoneIndependent ProviderErrorKind = iota + 1
	// ErrCapacity: the chosen zone has no capacity for this shape.
	ErrCapacity
	// ErrThrottled: the cloud's rate limit was hit; retry later.
	ErrThrottled
	// ErrUnavailable: a transient failure.
	ErrUnavailable
	// ErrQuota: an account or region quota (vCPUs, instances) is used up.
	// No zone would help and a retry needs the quota raised or other
	// instances gone, so it is retried with backoff, never in another zone.
	ErrQuota
)

func (k ProviderErrorKind) String() string {
	switch k {
	case ErrZoneIndependent:
		return "zone-independent"
	case ErrCapacity:
		return "capacity"
	case ErrThrottled:
		return "throttled"
	case ErrUnavailable:
		return "unavailable"
	case ErrQuota:
		return "quota"
	}
	return "unknown"
}

// Retryable reports whether waiting may cure a failure of this kind (P16).
func (k ProviderErrorKind) Retryable() bool {
	return k == ErrCapacity || k == ErrThrottled || k == ErrUnavailable || k == ErrQuota
}

// ProviderError is a classified provider failure.
type ProviderError struct {
	Kind    ProviderErrorKind
	Zone    string // the zone it applies to, for ErrCapacity
	Message string
	Err     error
}

func (e *ProviderError) Error() string {
	msg := e.Message
	if msg == "" && e.Err != nil {
		msg = e.Err.Error()
	}
	return msg
}

func (e *ProviderError) Unwrap() error { return e.Err }

// NewProviderError returns a classified error with a formatted message.
func NewProviderError(kind ProviderErrorKind, zone, format string, args ...any) *ProviderError {
	return &ProviderError{Kind: kind, Zone: zone, Message: fmt.Sprintf(format, args...)}
}

// ProviderErrorKindOf returns the kind of the first *ProviderError in err's
// chain, or 0 when there is none.
func ProviderErrorKindOf(err error) ProviderErrorKind {
	var pe *ProviderError
	if errors.As(err, &pe) {
		return pe.Kind
	}
	return 0
}

// IsZoneIndependent reports whether no other zone would help. Unclassified
// errors count as zone-specific, as in Juju.
func IsZoneIndependent(err error) bool { return ProviderErrorKindOf(err) == ErrZoneIndependent }

// BatchEnroller is offered by BatchStarters whose batch instances boot
// with shared user data and can prove which instance they are (a signed
// instance identity document, SPEC §4): the provisioner then gives a
// batch's starts an enrolment config with a one-time batch token instead
// of each machine's password, and the instances enrol for their
// credentials.
type BatchEnroller interface {
	// EnrolsBatches reports whether batches enrol.
	EnrolsBatches() bool
}
