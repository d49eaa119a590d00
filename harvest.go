package muster

import (
	"context"
	"time"
)

// TagQuarantined is the tag of an instance that harvest quarantined (R6):
// stopped, not terminated, since the RFC 3339 time it holds.
const TagQuarantined = "muster-quarantined"

// Quarantiner is offered by providers that can stop an instance without
// destroying it and mark it so that a later listing shows the mark (R6).
// Each provider does it in its own way (a tag, a label, a config key);
// Instances reports the mark as Tags[TagQuarantined]. Methods are safe for
// concurrent use.
type Quarantiner interface {
	// Quarantine stops the instance and marks it quarantined since since.
	// ENotFound when the model has no such instance.
	Quarantine(ctx context.Context, id string, since time.Time) error
	// Restore starts a quarantined instance again and drops the mark.
	// ENotFound when the model has no such instance.
	Restore(ctx context.Context, id string) error
}

// QuarantinedSince returns when inst was quarantined, from its tag; false
// when it is not quarantined (or the tag is not a time).
func QuarantinedSince(inst Instance) (time.Time, bool) {
	v := inst.Tags[TagQuarantined]
	if v == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, v)
	return t, err == nil
}

// FormatQuarantineTag is the value of TagQuarantined for a quarantine
// that began at t.
func FormatQuarantineTag(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// CapacityBlock is one entry of the capacity memory (Z7): zone Zone of
// cloud Cloud had no capacity for launch shape Shape, so no model on that
// cloud tries it for that shape until Until.
type CapacityBlock struct {
	Cloud string // the cloud's endpoint or region, as the provider names it
	Zone  string
	Shape string
	Until time.Time
}

// HarvestStore keeps what harvest and the zone planner remember beyond one
// provisioner's life. Methods are safe for concurrent use.
type HarvestStore interface {
	// ReleaseInstances remembers instances as released from muster (H8):
	// never counted as unknown or harvested again. ENotFound for an
	// unknown model; releasing an id twice is not an error.
	ReleaseInstances(ctx context.Context, modelUUID string, ids []string) error
	// BlockCapacity records a capacity block; a block of the same cloud,
	// zone and shape is replaced when b ends later. EInvalid for an empty
	// cloud, zone or shape.
	BlockCapacity(ctx context.Context, b CapacityBlock) error
	// CapacityBlocks returns the blocks of a cloud that end after now,
	// by zone and shape.
	CapacityBlocks(ctx context.Context, cloud string, now time.Time) ([]CapacityBlock, error)
}

// EventDecision is the kind of the event that records one start attempt's
// decision as JSON (an AttemptDecision), for `muster explain` (R8).
const EventDecision = "decision"

// ZoneCount is a candidate zone with the machines that counted for it.
type ZoneCount struct {
	Zone     string `json:"zone"`
	Machines int    `json:"machines"`
}

// ZoneBlock is a zone left out by the capacity memory until a time.
type ZoneBlock struct {
	Zone  string    `json:"zone"`
	Until time.Time `json:"until"`
}

// AttemptDecision is what the provisioner decided and saw in one start
// attempt of a machine (R8).
type AttemptDecision struct {
	Attempt     int         `json:"attempt"` // 1 for the first call of the start
	Time        time.Time   `json:"time"`
	Shape       string      `json:"shape"`
	Candidates  []ZoneCount `json:"candidates"` // zones it could use, with their counts
	Failed      []string    `json:"failed"`     // zones it failed in before
	Excluded    []string    `json:"excluded"`   // zones placement, constraints or volumes rule out
	Blocked     []ZoneBlock `json:"blocked"`    // zones the capacity memory ruled out (Z7)
	Zone        string      `json:"zone"`       // the zone chosen; "" without zones
	LimiterWait float64     `json:"limiter-wait-seconds"`
	Instance    string      `json:"instance"` // on success
	Error       string      `json:"error"`
	ErrorKind   string      `json:"error-kind"` // capacity, throttled, ... or "" on success
	Next        string      `json:"next"`       // what happens next, in words
	NextRetry   time.Time   `json:"next-retry"` // when the next attempt is due; zero = none
}
