// Package provisioner is muster's engine (SPEC §2): one Provisioner per
// model keeps the provider's instances in step with the model's machines.
//
// One goroutine (the loop) owns the state: which machines are starting or
// stopping, the view of the provider's instances and the harvest mode. It
// reacts to the store's change log, to results sent back by a resizable
// pool of workers that do the provider and store I/O of starts and stops,
// to a resync timer and to retry timers. Deciding is kept apart from doing:
// classification (classify.go), the zone planner (zones.go) and harvest
// planning (harvest.go) are pure functions of a snapshot, tested with
// tables. Time comes from an injected muster.Clock.
package provisioner
