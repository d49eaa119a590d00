package provisioner

import (
	"context"
	"log/slog"
	"time"

	"github.com/musterhq/muster"
)

// Store is what a provisioner needs from the state store.
type Store interface {
	muster.MachineStore
	muster.EventStore
	muster.ChangeWatcher
	muster.EnrolmentStore // batch enrolment tokens (SPEC §4)
	muster.HarvestStore
	Model(ctx context.Context, nameOrUUID string) (muster.Model, error)
}

// Config configures a Provisioner. ControllerUUID, Model (with its UUID),
// Store and Provider are required.
type Config struct {
	ControllerUUID string
	// Model names the model (UUID and Name). Its Settings must be valid,
	// but each run starts from the settings the store holds then.
	Model muster.Model

	Store    Store
	Provider muster.Provider
	// Cloud names the cloud Provider talks to (its endpoint or region),
	// the key of the capacity memory in the store (Z7): every model with
	// the same Cloud shares it. "" means this model's alone.
	Cloud string
	// AgentBinaries finds the agent binaries of P8; nil means none are
	// available, so every start fails with a provisioning error.
	AgentBinaries muster.AgentBinaryFinder
	Clock         muster.Clock // default muster.SystemClock
	Logger        *slog.Logger // default: discard
	Observer      Observer     // metric hooks; nil = none
	// APIAddresses (controller URLs, https://host:port) and CACert (PEM)
	// go into the agent configuration (muster.AgentConfig, as JSON) in the
	// user data of every instance.
	APIAddresses []string
	CACert       string
	// AgentAddresses, when set, returns the controller URLs for each
	// start's agent configuration instead of APIAddresses: the
	// controllers sharing a store come and go while a model runs. The
	// slice returned is not modified.
	AgentAddresses func() []string
	// PasswordKey, when set, makes agent passwords a keyed hash of the
	// model, machine and launch token instead of random. The controller
	// derives it from a secret every controller of the store shares, so
	// a start left in flight by a crash can be repeated with the same
	// launch token (the cloud's idempotency token, C1) and the same
	// password after a restart: the cloud hands back the instance the
	// first call made rather than launching a second one.
	PasswordKey []byte
	// Idle, when set, is called by the provisioner's loop each time it is
	// about to wait with nothing ready to handle: no change, timer or
	// worker result. rev is the revision of the last change set it
	// handled and jobs the number of pool jobs still queued or running;
	// with jobs == 0 nothing happens until the store changes or the clock
	// moves. It runs on the loop goroutine and must not block. Tests use
	// it to prove that something did not happen; nil in production.
	Idle func(rev int64, jobs int)
}

// Observer receives metric events. Methods are called from several
// goroutines and must not block.
type Observer interface {
	// ProviderCall reports one provider call: kind is "start",
	// "start-batch", "stop", "instances", "zones", "subnets" or
	// "derive-zones"; outcome is "ok", "cancelled" or the error kind
	// ("capacity", "throttled", "unavailable", "zone-independent",
	// "unknown").
	ProviderCall(kind, outcome string, d time.Duration)
	// Provisioned reports the end of a start job: from queueing to the
	// record (ok) or to the provisioning error.
	Provisioned(ok bool, d time.Duration)
	// Queue reports the pool's queue length and size when they change.
	Queue(queued, workers int)
	// Harvested reports stopped instances: kind "dead", "unknown" or
	// "duplicate".
	Harvested(kind string, n int)
	// Throttled reports a throttled call and the client-side rate after
	// slowing down, in calls per second.
	Throttled(kind string, rate float64)
	// Machines reports the model's machines by status and instance status
	// each time the counts change. The loop keeps them from the machines
	// it reads anyway (every full pass and every change), so metrics never
	// read the store (S7). The map is the observer's to keep.
	Machines(counts map[MachineKey]int)
}

// MachineKey is a machine status and instance status: the labels of the
// machine counts.
type MachineKey struct {
	Status         muster.MachineStatus
	InstanceStatus muster.InstanceStatus
}

type nopObserver struct{}

func (nopObserver) ProviderCall(string, string, time.Duration) {}
func (nopObserver) Provisioned(bool, time.Duration)            {}
func (nopObserver) Queue(int, int)                             {}
func (nopObserver) Harvested(string, int)                      {}
func (nopObserver) Throttled(string, float64)                  {}
func (nopObserver) Machines(map[MachineKey]int)                {}

// agentAddresses returns the controller URLs for an agent configuration.
func (p *Provisioner) agentAddresses() []string {
	if p.cfg.AgentAddresses != nil {
		return p.cfg.AgentAddresses()
	}
	return p.cfg.APIAddresses
}
