package muster

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Life is a machine's life cycle: alive → dying → dead → removed. It only
// moves forward.
type Life string

const (
	LifeAlive Life = "alive"
	LifeDying Life = "dying"
	LifeDead  Life = "dead"
)

func (l Life) rank() int {
	switch l {
	case LifeAlive:
		return 0
	case LifeDying:
		return 1
	case LifeDead:
		return 2
	}
	return -1
}

// Valid reports whether l is a known life.
func (l Life) Valid() bool { return l.rank() >= 0 }

// CanBecome reports whether a machine with life l may move to next: staying
// put or moving forward is allowed, moving back is not.
func (l Life) CanBecome(next Life) bool {
	return l.Valid() && next.Valid() && next.rank() >= l.rank()
}

// MachineStatus is owned by the machine's agent.
type MachineStatus string

const (
	StatusPending MachineStatus = "pending" // declared, agent not yet logged in
	StatusStarted MachineStatus = "started" // agent logged in
	StatusDown    MachineStatus = "down"    // agent stopped heartbeating
	StatusStopped MachineStatus = "stopped"
	StatusError   MachineStatus = "error"
)

// Valid reports whether s is a known machine status.
func (s MachineStatus) Valid() bool {
	switch s {
	case StatusPending, StatusStarted, StatusDown, StatusStopped, StatusError:
		return true
	}
	return false
}

// InstanceStatus is owned by the provisioner.
type InstanceStatus string

const (
	InstanceNone              InstanceStatus = ""
	InstanceAllocating        InstanceStatus = "allocating"
	InstanceRunning           InstanceStatus = "running"
	InstanceProvisioningError InstanceStatus = "provisioning error"
)

// Valid reports whether s is a known instance status.
func (s InstanceStatus) Valid() bool {
	switch s {
	case InstanceNone, InstanceAllocating, InstanceRunning, InstanceProvisioningError:
		return true
	}
	return false
}

// Hardware is what an instance turned out to be. Sizes are MiB.
type Hardware struct {
	Arch             string `json:"arch,omitempty"`
	Cores            uint64 `json:"cores,omitempty"`
	Mem              uint64 `json:"mem,omitempty"`
	RootDisk         uint64 `json:"root-disk,omitempty"`
	AvailabilityZone string `json:"availability-zone,omitempty"`
}

// String formats h as "arch=amd64 cores=2 mem=4096M availability-zone=a".
func (h Hardware) String() string {
	var parts []string
	if h.Arch != "" {
		parts = append(parts, "arch="+h.Arch)
	}
	if h.Cores > 0 {
		parts = append(parts, "cores="+strconv.FormatUint(h.Cores, 10))
	}
	if h.Mem > 0 {
		parts = append(parts, fmt.Sprintf("mem=%dM", h.Mem))
	}
	if h.RootDisk > 0 {
		parts = append(parts, fmt.Sprintf("root-disk=%dM", h.RootDisk))
	}
	if h.AvailabilityZone != "" {
		parts = append(parts, "availability-zone="+h.AvailabilityZone)
	}
	return strings.Join(parts, " ")
}

// StorageDirective asks for a named volume started with the instance,
// written "data=10G" or "data=10G,pool=ssd".
type StorageDirective struct {
	Name string `json:"name"`
	Size uint64 `json:"size"` // MiB
	Pool string `json:"pool,omitempty"`
}

// ParseStorage parses "name=size[,pool=P]".
func ParseStorage(s string) (StorageDirective, error) {
	first, rest, _ := strings.Cut(s, ",")
	name, size, ok := strings.Cut(first, "=")
	if !ok {
		return StorageDirective{}, Errorf(EInvalid, "bad storage %q: want name=size[,pool=P]", s)
	}
	if err := checkName(name); err != nil {
		return StorageDirective{}, Errorf(EInvalid, "bad storage %q: %v", s, err)
	}
	mib, err := ParseSize(size)
	if err != nil || mib == 0 {
		return StorageDirective{}, Errorf(EInvalid, "bad storage %q: invalid size %q", s, size)
	}
	d := StorageDirective{Name: name, Size: mib}
	if rest != "" {
		k, v, ok := strings.Cut(rest, "=")
		if !ok || k != "pool" {
			return StorageDirective{}, Errorf(EInvalid, "bad storage %q: only pool=P may follow the size", s)
		}
		if err := checkName(v); err != nil {
			return StorageDirective{}, Errorf(EInvalid, "bad storage %q: pool: %v", s, err)
		}
		d.Pool = v
	}
	return d, nil
}

// String formats d so that ParseStorage gives it back.
func (d StorageDirective) String() string {
	s := d.Name + "=" + FormatSize(d.Size)
	if d.Pool != "" {
		s += ",pool=" + d.Pool
	}
	return s
}

// ParsePlacement parses a placement directive. The only form is "zone=X";
// "" means no placement. It returns the zone.
func ParsePlacement(s string) (zone string, err error) {
	if s == "" {
		return "", nil
	}
	k, v, ok := strings.Cut(s, "=")
	if !ok || k != "zone" {
		return "", Errorf(EInvalid, "bad placement %q: want zone=NAME", s)
	}
	if err := checkName(v); err != nil {
		return "", Errorf(EInvalid, "bad placement %q: %v", s, err)
	}
	return v, nil
}

// DefaultBase is the base of machines that do not name one.
const DefaultBase = "ubuntu@24.04"

// ParseBase checks a base written "os@channel" such as "ubuntu@24.04".
func ParseBase(s string) (os, channel string, err error) {
	os, channel, ok := strings.Cut(s, "@")
	if !ok || checkName(os) != nil || checkName(channel) != nil {
		return "", "", Errorf(EInvalid, "bad base %q: want os@channel, e.g. %s", s, DefaultBase)
	}
	return os, channel, nil
}

// Volume is a volume started with an instance.
type Volume struct {
	Name     string `json:"name"`
	VolumeID string `json:"volume-id"`
	Size     uint64 `json:"size"` // MiB
	Pool     string `json:"pool,omitempty"`
}

// VolumeAttachment attaches a named volume to a machine's instance.
type VolumeAttachment struct {
	Volume     string `json:"volume"`     // volume name
	MachineID  string `json:"machine-id"` // must be the machine being started
	InstanceID string `json:"instance-id,omitempty"`
	DeviceName string `json:"device-name,omitempty"`
}

// InstanceInfo is what the provisioner records about a machine's instance.
type InstanceInfo struct {
	InstanceID  string             `json:"instance-id"`
	DisplayName string             `json:"display-name,omitempty"`
	Zone        string             `json:"zone,omitempty"`
	Hardware    Hardware           `json:"hardware"`
	Addresses   []string           `json:"addresses,omitempty"`
	Volumes     []Volume           `json:"volumes,omitempty"`
	Attachments []VolumeAttachment `json:"attachments,omitempty"`
}

// Machine is a declared machine of a model.
type Machine struct {
	ModelUUID string
	ID        string // "0", "1", ... per model, never reused
	Life      Life

	Status          MachineStatus // owned by the agent
	StatusMessage   string
	InstanceStatus  InstanceStatus // owned by the provisioner
	InstanceMessage string

	Constraints  Constraints
	Base         string // "ubuntu@24.04"
	Group        string // spread group; "" = none
	Placement    string // "zone=b" or ""
	Storage      []StorageDirective
	KeepInstance bool

	// Instance is the recorded instance; nil until one is recorded.
	Instance *InstanceInfo

	LaunchToken  string // recorded before StartInstance (C1)
	Nonce        string // of the current provisioning attempt
	PasswordHash string // hash of the agent's password (HashSecret)

	// AutoRetries counts automatic retries of a retryable provisioning
	// error (P16); NextRetry is when the next one is due.
	AutoRetries int
	NextRetry   time.Time

	Created time.Time
	Updated time.Time
	// LastSeen is when the controller last wrote down that the machine's
	// agent showed up (heartbeats, written in batches); zero for never.
	LastSeen time.Time
}

// HasInstance reports whether an instance is recorded for m.
func (m Machine) HasInstance() bool { return m.Instance != nil && m.Instance.InstanceID != "" }

// InstanceID returns the recorded instance id, or "".
func (m Machine) InstanceID() string {
	if m.Instance == nil {
		return ""
	}
	return m.Instance.InstanceID
}

// MachineTemplate declares a new machine.
type MachineTemplate struct {
	Constraints Constraints
	Base        string // DefaultBase when empty
	Group       string
	Placement   string
	Storage     []StorageDirective
}

// Validate checks t and fills in defaults.
func (t *MachineTemplate) Validate() error {
	if t.Base == "" {
		t.Base = DefaultBase
	}
	if _, _, err := ParseBase(t.Base); err != nil {
		return err
	}
	if t.Group != "" {
		if err := checkName(t.Group); err != nil {
			return Errorf(EInvalid, "bad group %q: %v", t.Group, err)
		}
	}
	if _, err := ParsePlacement(t.Placement); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, s := range t.Storage {
		if err := checkName(s.Name); err != nil || s.Size == 0 {
			return Errorf(EInvalid, "bad storage %q", s.String())
		}
		if seen[s.Name] {
			return Errorf(EInvalid, "storage %q given more than once", s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

// MachineUpdate changes some fields of one machine; nil fields are left
// alone. Store.UpdateMachines applies a batch of them in one transaction.
type MachineUpdate struct {
	ID              string
	Life            *Life
	Status          *MachineStatus
	StatusMessage   *string
	InstanceStatus  *InstanceStatus
	InstanceMessage *string
	KeepInstance    *bool
	LaunchToken     *string
	Nonce           *string
	PasswordHash    *string
	AutoRetries     *int
	NextRetry       *time.Time
	// Addresses and Hardware, when set, replace those of the recorded
	// instance (the agent reports them); the machine must have one.
	Addresses *[]string
	Hardware  *Hardware
	// Constraints and Base, when set, replace the machine's template
	// (R5: apply records a group's new template); its instance stays
	// until it is replaced.
	Constraints *Constraints
	Base        *string
}

// Ptr returns a pointer to v, for building MachineUpdates.
func Ptr[T any](v T) *T { return &v }

// InstanceRecord is the guarded record of a started instance (P11).
type InstanceRecord struct {
	MachineID string
	Nonce     string // must equal the machine's recorded nonce
	Info      InstanceInfo
	// Replaces, when set, makes the record a replacement (R1–R5): it is
	// accepted only while the machine is alive, its recorded instance is
	// Replaces and its launch token is LaunchToken; it then records Info,
	// Nonce and PasswordHash as the machine's and sets the machine
	// pending, so that only the new instance's agent can log in.
	Replaces     string
	LaunchToken  string
	PasswordHash string
	// ReleaseReplaced, with Replaces, releases the replaced instance
	// (H8) in the same transaction: a keep-instance machine's old
	// instance is left running and never taken for a duplicate (C3) or
	// an unknown one, even after a crash right after the record.
	ReleaseReplaced bool
}

// ProvisioningInfo is what the provisioner needs to start a machine.
type ProvisioningInfo struct {
	MachineID   string
	Constraints Constraints
	Base        string
	Placement   string
	Storage     []StorageDirective
	Group       string
}

// NewMachineTemplate builds and checks a template from the text forms the
// CLI and the API take: constraints, group, base, placement, and storage
// directives such as "data=10G,pool=ssd".
func NewMachineTemplate(constraints, group, base, placement string, storage []string) (MachineTemplate, error) {
	c, err := ParseConstraints(constraints)
	if err != nil {
		return MachineTemplate{}, err
	}
	t := MachineTemplate{Constraints: c, Base: base, Group: group, Placement: placement}
	for _, sd := range storage {
		d, err := ParseStorage(sd)
		if err != nil {
			return MachineTemplate{}, err
		}
		t.Storage = append(t.Storage, d)
	}
	if err := t.Validate(); err != nil {
		return MachineTemplate{}, err
	}
	return t, nil
}

// MachineIDLess orders machine ids numerically ("2" before "10"), with
// anything that is not a number after the numbers, by text.
func MachineIDLess(a, b string) bool {
	na, ea := strconv.ParseUint(a, 10, 64)
	nb, eb := strconv.ParseUint(b, 10, 64)
	if ea == nil && eb == nil {
		return na < nb
	}
	if (ea == nil) != (eb == nil) {
		return ea == nil
	}
	return a < b
}

// SortMachineIDs sorts ids with MachineIDLess.
func SortMachineIDs(ids []string) {
	sort.Slice(ids, func(i, j int) bool { return MachineIDLess(ids[i], ids[j]) })
}
