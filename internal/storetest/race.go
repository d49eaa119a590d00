//go:build race

package storetest

// raceEnabled scales down the volume tests under the race detector, which
// needs interleavings rather than volume and makes every write slow.
const raceEnabled = true
