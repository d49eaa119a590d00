package muster

import (
	"context"
	"time"
)

// Event is one entry of a model's event log: who did what, when.
type Event struct {
	Seq       int64 // assigned by the store, increasing per store
	ModelUUID string
	MachineID string // "" for model-wide events
	Time      time.Time
	Actor     string // "admin", "provisioner", "agent/3", ...
	Kind      string // "add-machine", "start", "started", "retry", "error", "harvest", ...
	Message   string
}

// EventFilter selects events. Zero fields select everything.
type EventFilter struct {
	MachineID string
	AfterSeq  int64 // only events with Seq > AfterSeq
	Limit     int   // at most this many, newest last; 0 = no limit
	// Page, when not 0, reads at most this many events after AfterSeq,
	// oldest first: a page of the log, for readers that go through it with
	// bounded memory. Not together with Limit.
	Page int
}

// ChangeKind names what a change log entry is about.
type ChangeKind string

const (
	ChangeMachine ChangeKind = "machine" // a machine was added, changed or removed
	ChangeModel   ChangeKind = "model"   // a model's settings or config changed
	ChangeEvent   ChangeKind = "event"   // an event was appended
)

// ChangeSet is what a Watcher delivers: the coalesced changes of one model
// up to and including Revision.
type ChangeSet struct {
	Revision int64
	Machines []string // ids of machines added, changed or removed, sorted, no repeats
	Model    bool     // the model's settings or config changed
	Events   bool     // events were appended
	// Resync is set when the watcher resumed from a revision whose
	// change-log entries were trimmed (S10): Machines then holds every
	// machine of the model, and a machine removed in the gap is simply
	// missing from it, so the consumer reconciles in full.
	Resync bool
}

// Watcher delivers ChangeSets until it is closed or its context ends. The
// channel is closed then, and Err says why (nil after Close).
type Watcher interface {
	Changes() <-chan ChangeSet
	Err() error
	Close() error
}

// ModelStore keeps models. Methods are safe for concurrent use.
type ModelStore interface {
	// CreateModel creates a model with a fresh UUID (when m.UUID is empty)
	// and returns it. EConflict if the name is taken, EInvalid for a bad
	// name or settings.
	CreateModel(ctx context.Context, m Model) (Model, error)
	// Model returns the model with the given name or UUID; ENotFound.
	Model(ctx context.Context, nameOrUUID string) (Model, error)
	// Models returns every model, by name.
	Models(ctx context.Context) ([]Model, error)
	// UpdateModelSettings replaces a model's settings; EInvalid, ENotFound.
	UpdateModelSettings(ctx context.Context, modelUUID string, s Settings) error
	// RemoveModel removes a model that has no machines; EConflict if it
	// still has some, ENotFound.
	RemoveModel(ctx context.Context, modelUUID string) error
}

// MachineStore keeps machines. Methods are safe for concurrent use. Every
// method that takes a model UUID returns ENotFound for an unknown model.
type MachineStore interface {
	// AddMachines declares machines in one transaction and returns them
	// with their new ids, which are never reused in the model. EInvalid for
	// a bad template (nothing is added).
	AddMachines(ctx context.Context, modelUUID string, ts []MachineTemplate) ([]Machine, error)
	// Machine returns one machine; ENotFound.
	Machine(ctx context.Context, modelUUID, id string) (Machine, error)
	// Machines returns the named machines that exist, in id order; nil ids
	// means every machine of the model.
	Machines(ctx context.Context, modelUUID string, ids []string) ([]Machine, error)
	// MachinesPage returns at most limit machines whose ids come after
	// the id after ("" for the first page), in id order: a model's
	// machines read in pages with bounded memory. EInvalid for an after
	// that is not a machine id or a limit under 1.
	MachinesPage(ctx context.Context, modelUUID, after string, limit int) ([]Machine, error)
	// RecordHeartbeats sets the LastSeen of the named machines that exist
	// to at, in one transaction that neither changes Updated nor appears
	// in the change log (nothing waits for heartbeats), and returns the
	// life of each of them; missing ids are left out.
	RecordHeartbeats(ctx context.Context, modelUUID string, ids []string, at time.Time) (map[string]Life, error)
	// UpdateMachines applies the updates in one transaction: all or none.
	// ENotFound for a missing machine, EInvalid for a life that would move
	// backward or a bad status.
	// The events, when given, are appended in the same transaction, so a
	// watcher or reader never sees a change without its event or events
	// out of the order of their changes (S10).
	UpdateMachines(ctx context.Context, modelUUID string, us []MachineUpdate, events ...Event) error
	// RecordInstances records started instances (P11) in one transaction.
	// Each record is refused on its own (errs[i] with EConflict) if the
	// machine is dead, already has an instance, or the nonce differs from
	// the recorded one (ENotFound if the machine is gone); an accepted one
	// sets instance status running and clears the instance message (P12).
	// err is for a failure of the whole batch, in which case nothing is
	// recorded.
	RecordInstances(ctx context.Context, modelUUID string, rs []InstanceRecord) (errs []error, err error)
	// RemoveMachines removes dead machines in one transaction. EConflict if
	// any is not dead (nothing is removed); missing ids are ignored. The
	// instance of a removed keep-instance machine is remembered as
	// released (H8).
	RemoveMachines(ctx context.Context, modelUUID string, ids []string) error
	// ReleasedInstances returns the ids of instances released from muster.
	ReleasedInstances(ctx context.Context, modelUUID string) (map[string]bool, error)
	// ProvisioningInfo returns what is needed to start each named machine
	// that exists, in one query.
	ProvisioningInfo(ctx context.Context, modelUUID string, ids []string) (map[string]ProvisioningInfo, error)
	// DistributionGroups returns, for each named machine that has a group,
	// the ids of the alive machines of that group (itself included).
	DistributionGroups(ctx context.Context, modelUUID string, ids []string) (map[string][]string, error)
}

// EventStore keeps each model's event log.
type EventStore interface {
	// AppendEvents appends events in one transaction; Seq and (when zero)
	// Time are set by the store.
	AppendEvents(ctx context.Context, es []Event) error
	// Events returns a model's events in Seq order.
	Events(ctx context.Context, modelUUID string, f EventFilter) ([]Event, error)
	// Trim deletes a model's events and change-log entries older than
	// retention (S10). A watcher that has not read past the trimmed
	// entries gets a full resync instead of a gap. ENotFound for an
	// unknown model, EInvalid for a retention of zero or less. Safe for
	// concurrent use.
	Trim(ctx context.Context, modelUUID string, retention time.Duration) (Trimmed, error)
}

// Trimmed says what one Trim deleted.
type Trimmed struct {
	Events  int   // events deleted
	Changes int   // change-log entries deleted
	Floor   int64 // revision up to which the model's change log is gone
}

// ChangeWatcher watches a model's change log.
type ChangeWatcher interface {
	// Watch starts a watcher on one model for the given kinds (all when
	// none are given). With from == 0 the first ChangeSet holds every
	// machine id of the model (and Model true); with from > 0 the watcher
	// resumes after that revision and no change after it is missed. The
	// watcher ends when ctx ends.
	Watch(ctx context.Context, modelUUID string, from int64, kinds ...ChangeKind) (Watcher, error)
	// Revision returns the newest revision of the change log.
	Revision(ctx context.Context) (int64, error)
}

// ControllerStore keeps controller-wide configuration (uuid, CA, token
// hashes): a string map shared by every controller on the same store.
type ControllerStore interface {
	// ControllerConfig returns the whole map.
	ControllerConfig(ctx context.Context) (map[string]string, error)
	// InitControllerConfig sets the keys that are not set yet, in one
	// transaction, and returns the resulting map (so the first controller's
	// values win).
	InitControllerConfig(ctx context.Context, kv map[string]string) (map[string]string, error)
	// SetControllerConfig sets one key.
	SetControllerConfig(ctx context.Context, key, value string) error
}

// Store is the whole state store.
type Store interface {
	ModelStore
	MachineStore
	EventStore
	ChangeWatcher
	ControllerStore
	LeaseStore
	ControllerRegistry
	EnrolmentStore
	HarvestStore
	Close() error
}
