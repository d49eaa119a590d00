package muster

import (
	"context"
	"time"
)

// Batch enrolment (SPEC §4): instances of one batch start share their user
// data, so it carries no per-machine secret, only a one-time enrolment
// token of the batch. Each instance proves which instance it is with its
// cloud-signed identity document, and the controller hands it the
// credentials of the machine recorded with that instance, once.

// InstanceIdentity is a cloud's instance identity document, in EC2's
// shape (what /latest/dynamic/instance-identity/document returns).
type InstanceIdentity struct {
	InstanceID       string    `json:"instanceId"`
	Region           string    `json:"region"`
	AvailabilityZone string    `json:"availabilityZone"`
	ImageID          string    `json:"imageId"`
	InstanceType     string    `json:"instanceType"`
	AccountID        string    `json:"accountId"`
	Architecture     string    `json:"architecture"`
	PendingTime      time.Time `json:"pendingTime"`
	PrivateIP        string    `json:"privateIp"`
}

// EnrolmentStore keeps the enrolment tokens of batch starts. Methods are
// safe for concurrent use.
type EnrolmentStore interface {
	// SetEnrolment records tokenHash (HashSecret of a batch's enrolment
	// token) for the named machines, with the credentials not handed out
	// yet. A machine's few previous tokens stay valid (the instance of a
	// crashed start, adopted by a repeat in another batch, carries its own
	// batch's); what binds an instance to a machine is its recorded
	// instance id. Missing machines are ignored; ENotFound for an unknown
	// model.
	SetEnrolment(ctx context.Context, modelUUID string, machineIDs []string, tokenHash string) error
	// Enrol hands out the credentials of each enrolment's machine, once,
	// to the instance recorded for it, all in one transaction (agents
	// enrolling together cost one): for each it checks that InstanceID is
	// the machine's recorded instance and Token one of its enrolment
	// tokens, sets the machine's password hash to PasswordHash, marks
	// the credentials handed out and records the machine seen now
	// (LastSeen, as RecordHeartbeats would: the agent is up). out[i] is
	// es[i]'s outcome, decided on its own: the machine (its nonce, its
	// LastSeen), or ENotFound when there is no such
	// machine; EUnavailable when the machine has no instance recorded yet
	// but this token is its batch's (the batch's instances are recorded
	// after its start call: try again); EUnauthorized when the instance is
	// another's or the token not the machine's; EConflict when the
	// credentials were handed out already (also by an earlier enrolment
	// of es) or the machine is dead; EInvalid for an enrolment missing a
	// field, or whose Then returned an invalid update or events. err is
	// the transaction's: then nothing changed.
	Enrol(ctx context.Context, modelUUID string, es []Enrolment) (out []Enrolled, err error)
}

// Enrolment is one instance's claim to its machine's credentials.
type Enrolment struct {
	MachineID    string
	InstanceID   string // from its verified identity document
	Token        string // the batch's enrolment token
	PasswordHash string // of the password to hand out
	// Then, when set, is called with the machine (as read, before this
	// enrolment) once the enrolment is granted, inside its transaction:
	// the update it returns (nil for none; its ID is the machine's) and
	// its events, which must be of the enrolment's model, are written in
	// the same transaction, so an agent's enrolment and first report cost
	// one write. Then may run more than once when the transaction is
	// retried; an invalid update or event refuses the enrolment (EInvalid)
	// before anything of it is written.
	Then func(Machine) (*MachineUpdate, []Event)
}

// Enrolled is the outcome of one Enrolment: the machine (with Then's
// update applied), or Err.
type Enrolled struct {
	Machine Machine
	Err     error
}
