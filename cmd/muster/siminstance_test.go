package main

import "github.com/musterhq/muster/sim"

// simInstanceJSON is one entry of `muster sim instances --format json`.
type simInstanceJSON = sim.InstanceSummary
