// Package muster holds the domain of the muster machine provisioner: machines,
// models and their settings, constraints, the provider contract, the store
// interfaces and the error codes shared by every other package.
//
// It imports only the standard library; implementations live in packages
// named after their dependency (sqlstore, sim, docker, api) and only
// cmd/muster wires them together.
package muster
