package api

import (
	"time"

	"github.com/musterhq/muster"
)

// Request and response bodies of the API. JSON keys are kebab-case; every
// list is encoded as [] when empty, never null.

// ModelInfo describes a model.
type ModelInfo struct {
	UUID           string            `json:"uuid"`
	ControllerUUID string            `json:"controller-uuid"`
	Name           string            `json:"name"`
	Provider       string            `json:"provider"`
	Config         map[string]string `json:"config"`   // provider configuration
	Settings       map[string]string `json:"settings"` // every model-config key, formatted
	Created        time.Time         `json:"created"`
}

// AddModelRequest is the body of POST /v1/models. Config keys that are
// model-config settings (muster.SettingKeys) set the model's settings; the
// others are the provider's configuration.
type AddModelRequest struct {
	Name     string            `json:"name"`
	Provider string            `json:"provider"`
	Config   map[string]string `json:"config,omitempty"`
}

// ModelConfigRequest is the body of PATCH /v1/models/{model}/config: the
// settings to change. All or none are applied.
type ModelConfigRequest struct {
	Set map[string]string `json:"set"`
}

// AddMachinesRequest is the body of POST /v1/models/{model}/machines.
type AddMachinesRequest struct {
	Count       int      `json:"count,omitempty"`       // 1 when 0; at most MaxAddMachines
	Constraints string   `json:"constraints,omitempty"` // Juju text form, e.g. "cores=2 mem=4G"
	Group       string   `json:"group,omitempty"`
	Base        string   `json:"base,omitempty"`      // muster.DefaultBase when empty
	Placement   string   `json:"placement,omitempty"` // "zone=b"
	Storage     []string `json:"storage,omitempty"`   // "data=10G[,pool=ssd]"
}

// MaxAddMachines bounds the count of one add-machines request.
const MaxAddMachines = 100000

// MachineIDs is a response listing machine ids.
type MachineIDs struct {
	IDs []string `json:"ids"`
}

// RemoveMachinesRequest is the body of POST /v1/models/{model}/remove-machines.
type RemoveMachinesRequest struct {
	IDs          []string `json:"ids"`
	All          bool     `json:"all,omitempty"` // every machine of the model, instead of IDs
	KeepInstance bool     `json:"keep-instance,omitempty"`
	Force        bool     `json:"force,omitempty"` // dead at once instead of dying
}

// RetryProvisioningRequest is the body of POST
// /v1/models/{model}/retry-provisioning: the named machines, or with All
// every machine in "provisioning error".
type RetryProvisioningRequest struct {
	IDs []string `json:"ids,omitempty"`
	All bool     `json:"all,omitempty"`
}

// Status is the body of GET /v1/models/{model}/status: SPEC §5.2's
// `muster status --format json`, plus "provisioner-error". Every key is
// always present.
type Status struct {
	Model            string                   `json:"model"`
	Provider         string                   `json:"provider"`
	HarvestMode      string                   `json:"harvest-mode"`
	ProvisionerError string                   `json:"provisioner-error"`
	HarvestBreaker   string                   `json:"harvest-breaker"` // why harvest holds back (R7); "" when it does not
	Machines         map[string]MachineStatus `json:"machines"`
	Zones            map[string]ZoneStatus    `json:"zones"`
	Remediation      []RemediationPause       `json:"remediation,omitempty"` // groups whose remediation is paused (R3)
	Replacing        map[string]string        `json:"replacing,omitempty"`   // machine id → reason of its replacement in flight
	// Next, in a page of the status (after= or limit=), is the after= of
	// the next page, "" on the last one; nil for the whole status.
	Next *string `json:"next,omitempty"`
}

// MachineStatus is one machine in Status.
type MachineStatus struct {
	Life            string   `json:"life"`
	Status          string   `json:"status"`
	StatusMessage   string   `json:"status-message"`
	InstanceID      string   `json:"instance-id"`
	InstanceStatus  string   `json:"instance-status"`
	InstanceMessage string   `json:"instance-message"`
	Zone            string   `json:"zone"`
	Group           string   `json:"group"`
	Base            string   `json:"base"`
	Constraints     string   `json:"constraints"`
	Hardware        string   `json:"hardware"`
	Addresses       []string `json:"addresses"`
	KeepInstance    bool     `json:"keep-instance"`
}

// ZoneStatus is one zone in Status.
type ZoneStatus struct {
	Available bool `json:"available"`
	Machines  int  `json:"machines"`
}

// ZoneInfo is one entry of GET /v1/models/{model}/zones.
type ZoneInfo struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Machines  int    `json:"machines"` // machines with an instance in the zone
	// Blocked lists the launch shapes the capacity memory keeps out of
	// the zone (Z7) and when each block ends.
	Blocked []BlockedShape `json:"blocked,omitempty"`
}

// BlockedShape is a launch shape a zone is remembered full for (Z7).
type BlockedShape struct {
	Shape string    `json:"shape"`
	Until time.Time `json:"until"`
}

// MachineInfo is one machine in full.
type MachineInfo struct {
	ID              string                    `json:"id"`
	Life            string                    `json:"life"`
	Status          string                    `json:"status"`
	StatusMessage   string                    `json:"status-message"`
	InstanceStatus  string                    `json:"instance-status"`
	InstanceMessage string                    `json:"instance-message"`
	Constraints     string                    `json:"constraints"`
	Base            string                    `json:"base"`
	Group           string                    `json:"group"`
	Placement       string                    `json:"placement"`
	Storage         []string                  `json:"storage"`
	KeepInstance    bool                      `json:"keep-instance"`
	Instance        *muster.InstanceInfo      `json:"instance"` // null until recorded
	LaunchToken     string                    `json:"launch-token"`
	Nonce           string                    `json:"nonce"`
	AutoRetries     int                       `json:"auto-retries"`
	NextRetry       *time.Time                `json:"next-retry"` // null when none is due
	Created         time.Time                 `json:"created"`
	Updated         time.Time                 `json:"updated"`
	Hardware        string                    `json:"hardware"` // formatted, "" before an instance
	Volumes         []muster.Volume           `json:"volumes"`
	Attachments     []muster.VolumeAttachment `json:"attachments"`
}

// MachineDetail is the body of GET /v1/models/{model}/machines/{id}: the
// machine and its most recent events (at most ShowMachineEvents, oldest
// first).
type MachineDetail struct {
	Machine MachineInfo `json:"machine"`
	Events  []EventInfo `json:"events"`
}

// ShowMachineEvents is how many recent events MachineDetail carries.
const ShowMachineEvents = 20

// EventInfo is one event of a model's log.
type EventInfo struct {
	Seq     int64     `json:"seq"`
	Model   string    `json:"model"` // model UUID
	Machine string    `json:"machine"`
	Time    time.Time `json:"time"`
	Actor   string    `json:"actor"`
	Kind    string    `json:"kind"`
	Message string    `json:"message"`
}

// EventQuery filters GET /v1/models/{model}/events (query parameters
// machine, after and limit).
type EventQuery struct {
	Machine string
	After   int64
	Limit   int
}

// FleetGroup is one group of a fleet to apply, in an ApplyRequest and in
// a fleet file (ParseFleet).
type FleetGroup struct {
	Name        string   `json:"name" yaml:"name"`
	Count       int      `json:"count" yaml:"count"`
	Constraints string   `json:"constraints,omitempty" yaml:"constraints"`
	Base        string   `json:"base,omitempty" yaml:"base"`
	Storage     []string `json:"storage,omitempty" yaml:"storage"`
	// Health settings of the group (SPEC R1–R3); empty = the model's.
	RegistrationTimeout string `json:"registration-timeout,omitempty" yaml:"registration-timeout"`
	UnhealthyAfter      string `json:"unhealthy-after,omitempty" yaml:"unhealthy-after"`
	MaxUnhealthy        string `json:"max-unhealthy,omitempty" yaml:"max-unhealthy"`
	MaxInFlight         string `json:"max-in-flight,omitempty" yaml:"max-in-flight"`
}

// ApplyRequest is the body of POST /v1/models/{model}/apply. Groups not
// named in the request are left alone.
type ApplyRequest struct {
	Groups []FleetGroup `json:"groups"`
	DryRun bool         `json:"dry-run,omitempty"`
	// Replace replaces drifted machines as a rolling update (R5).
	Replace bool `json:"replace,omitempty"`
}

// ApplyResult is the plan of an apply and, unless DryRun, what was done.
type ApplyResult struct {
	DryRun bool        `json:"dry-run"`
	Groups []GroupPlan `json:"groups"`
}

// GroupPlan is the plan for one group.
type GroupPlan struct {
	Name   string   `json:"name"`
	Have   int      `json:"have"`   // alive machines of the group before
	Want   int      `json:"want"`   // the count asked for
	Add    int      `json:"add"`    // machines to add
	Added  []string `json:"added"`  // ids of the added machines (empty on a dry run)
	Remove []string `json:"remove"` // ids of the machines to remove (highest first)
	// Drifted are the machines whose template or instance is not the
	// group's (R5), and Drift says so in one line.
	Drifted []string `json:"drifted,omitempty"`
	Drift   string   `json:"drift,omitempty"`
}

// LoginRequest is the body of POST /v1/agent/login. Model is the model's
// name or UUID.
type LoginRequest struct {
	Model    string `json:"model"`
	Machine  string `json:"machine"`
	Password string `json:"password"`
	Nonce    string `json:"nonce"`
}

// LoginResult is the answer to a successful login.
type LoginResult struct {
	Token     string `json:"token"`      // the agent's bearer token
	ModelUUID string `json:"model-uuid"` // for the agent's later calls
	Heartbeat string `json:"heartbeat"`  // the period to heartbeat at, e.g. "10s"
}

// AgentMachine is what an agent sees of its own machine.
type AgentMachine struct {
	ID             string          `json:"id"`
	Life           string          `json:"life"`
	Status         string          `json:"status"`
	StatusMessage  string          `json:"status-message"`
	InstanceID     string          `json:"instance-id"`
	InstanceStatus string          `json:"instance-status"`
	Hardware       muster.Hardware `json:"hardware"`
	Addresses      []string        `json:"addresses"`
	Heartbeat      string          `json:"heartbeat"`
}

// AgentUpdate is the body of PUT /v1/agent/models/{model}/machines/{id}.
// Nil fields are left alone, and so are zero fields of Hardware (the
// recorded value stays). Status may be started, stopped or error.
// Life may only be "dead", and only once the machine is dying: the agent
// makes its machine dead when it has cleaned up, as Juju's machiner does.
type AgentUpdate struct {
	Life          *string          `json:"life,omitempty"`
	Status        *string          `json:"status,omitempty"`
	StatusMessage *string          `json:"status-message,omitempty"`
	Hardware      *muster.Hardware `json:"hardware,omitempty"`
	Addresses     *[]string        `json:"addresses,omitempty"`
}

// errorBody is the body of every error response.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// HeartbeatResult answers a heartbeat with the period to keep.
type HeartbeatResult struct {
	Heartbeat string `json:"heartbeat"` // e.g. "10s"
	Life      string `json:"life"`      // the machine's life: an agent whose machine is dying makes it dead
}
