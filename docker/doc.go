// Package docker is the muster provider on a local Docker Engine (SPEC §3.2):
// each instance is a container running the agent binary, built into an image
// on demand without a registry; each zone is a user-defined bridge network of
// its own; containers, volumes and networks carry labels for the controller
// and model and are only ever listed or removed by those labels.
package docker
