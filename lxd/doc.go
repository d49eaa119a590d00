// Package lxd is the muster provider on LXD (SPEC §3.4): each instance is
// an LXD system container (systemd, DHCP) booted by cloud-init with the
// same user data an ec2 instance gets (package cloudinit): it downloads the
// agent binary from the controller, checks its SHA-256 and starts the agent
// under systemd, so a machine becomes started only when its real agent
// logs in.
//
// Client: a minimal client of LXD's REST API over the daemon's unix socket
// with net/http (instances, state changes, operations and their wait,
// networks, custom storage volumes, images and aliases, resources). No Go
// LXD library is used: the module proxy refuses github.com/canonical/lxd,
// and github.com/lxc/incus/v6 is marked not to be used.
//
// Instances: named InstanceName(model, machine, launch token), so a start
// repeated with the same token finds the name taken and adopts the
// instance instead of making another (C1). Tags are user.* config keys
// (user.muster-controller, -model, -machine, -launch-token, -zone and the
// start's tags); listing and stopping look only at instances carrying
// this controller's and model's keys (H7). Constraints become limits.cpu,
// limits.memory and the root disk's size; arch must be the host's; cores
// and mem above the host's are zone-independent errors. Storage volumes
// become custom volumes "<instance>-<name>" of the model's pool, keyed to
// the instance, mounted at StorageDir/<name>, and deleted with it.
//
// Zones: one managed bridge network per configured zone, named
// NetworkName(zone), made on demand with a free /24 of 10.210.0.0/15, NAT
// and DHCP; a zone whose network cannot be made is unavailable (a capacity
// error for starts there). The host's address on each bridge
// (GatewayAddresses) is where a controller on this host must listen for
// the agents to reach it.
//
// Image: every ubuntu and debian base boots one image, the alias Config.Image
// (default DefaultImage), built once by BuildImage from Debian's packages
// (build-image.sh: debootstrap, then cloud-init; templates render the
// instance's cloud-init.user-data into the NoCloud seed) and cached as a
// tarball. A missing alias is a zone-independent start error.
//
// Errors are *muster.ProviderError: storage full and project limits →
// capacity; missing image, bad requests, permissions → zone-independent;
// the daemon unreachable or failing → unavailable.
package lxd
