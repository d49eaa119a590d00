//go:build !race

package storetest

const raceEnabled = false
