// Package docker is the muster provider on a local Docker Engine (SPEC §3.2):
// each instance is a container running `muster agent`.
//
// Image: built on demand, without a registry, from Config.AgentBinary. The
// build context is a tar made in memory with a Dockerfile FROM scratch whose
// entrypoint is `/muster agent --config /etc/muster/agent.yaml` and a rootfs/
// copied to /: the binary as /muster, and, for a dynamically linked binary
// (what `go build` makes when cgo is on), its ELF interpreter and its
// DT_NEEDED libraries, recursively, resolved from the host (its RUNPATH, then
// /lib/<triplet>, /usr/lib/<triplet>, /lib64, /usr/lib64, /lib, /usr/lib,
// /usr/local/lib) and copied, symlinks followed, under the paths they were
// found at, with LD_LIBRARY_PATH naming their directories. A library the
// host lacks is a zone-independent error. The image is tagged
// muster-agent:<first 12 hex digits of the binary's SHA-256> (static), or of
// a SHA-256 over the binary, the loader and the libraries (dynamic, so the
// tag changes with the host's libraries); it is labelled muster-image=agent,
// muster-agent-sha256=<binary hash> and, when dynamic,
// muster-agent-root-sha256=<that hash>. It is reused while those are
// unchanged, by every model and controller on the engine.
//
// Zones: each configured zone is a user-defined bridge network
// muster-<controller8>-<model8>-<zone>, made on demand, so addresses differ
// by zone. In host network mode containers share the host's network (their
// address is 127.0.0.1) and zones are labels only. A controller on the host
// is reached by agents on GatewayAddresses (the host's address on each zone
// network), so it should listen there or on 0.0.0.0.
//
// Instances: a container muster-<model8>-m<machine>-<token12> with labels
// muster-controller, muster-model, muster-machine, muster-launch-token,
// muster-zone and the start's tags; the start's user data is copied in as
// /etc/muster/agent.yaml (mode 0600) before the container starts. Instance
// ids are full container ids. Constraints become limits (cores → NanoCPUs,
// mem → Memory); storage becomes one labelled volume per muster volume,
// mounted at /var/lib/muster/storage/<name>. Containers, volumes and
// networks are listed and removed by the controller and model labels only.
package docker
