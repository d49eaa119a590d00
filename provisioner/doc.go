// Package provisioner is muster's engine (SPEC §2): one Provisioner per
// model keeps the provider's instances in step with the model's machines.
//
// One goroutine (the loop) owns the state: which machines are starting or
// stopping, the view of the provider's instances, the zone table and the
// harvest mode. It reacts to the store's change log, to results sent back
// by a resizable pool of workers that do the provider and store I/O of
// starts and stops (a start is prepared, then each attempt is one job; a
// failed attempt comes back to the loop, which updates the zone table and
// plans the next), to a resync timer and to retry timers. Workers never
// wait out a retry delay: the job waits in the loop until its timer fires.
// Deciding is kept apart from doing: classification (classify.go), the
// zone planner (zones.go), adoption and harvest planning (harvest.go) are
// functions of a snapshot with no I/O and no clock reads, tested with
// tables. Time comes from an injected muster.Clock; Config.Idle tells
// tests when the loop has nothing left to do.
package provisioner
