// Package docker is the muster provider on a local Docker Engine (SPEC §3.2):
// each instance is a container running `muster agent`.
//
// Image: built on demand, without a registry, from Config.AgentBinary (a
// static linux binary; a dynamically linked one is refused with a
// zone-independent error). The build context is a tar made in memory with
// the binary as /muster and a Dockerfile FROM scratch whose entrypoint is
// `/muster agent --config /etc/muster/agent.yaml`. The image is tagged
// muster-agent:<first 12 hex digits of the binary's SHA-256> and labelled
// muster-image=agent and muster-agent-sha256=<hash>; it is reused while the
// binary is unchanged, by every model and controller on the engine.
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
