#!/bin/bash
# Builds muster's LXD image: Debian (minbase, from Debian's packages) with
# cloud-init, systemd, curl and locales, as a unified LXD image tarball.
#
#   build-image.sh OUT.tar.gz [SUITE [MIRROR]]
#
# The image's templates render cloud-init's NoCloud seed from the instance's
# cloud-init.* config keys, so an instance boots with its user data. Run as
# root; takes minutes (debootstrap). Called by lxd.BuildImage.
set -euo pipefail
out=$1
suite=${2:-bookworm}
mirror=${3:-http://deb.debian.org/debian}
work=$(mktemp -d "$(dirname "$out")/.build-image.XXXXXX")
trap 'umount -l "$work/rootfs/proc" 2>/dev/null || true; rm -rf "$work"' EXIT
root=$work/rootfs

debootstrap --variant=minbase --include=systemd,systemd-sysv,ifupdown,isc-dhcp-client,ca-certificates,curl,locales \
  "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || { tail -30 "$work/debootstrap.log" >&2; exit 1; }
# cloud-init is installed afterwards: with --include its dependencies
# form a cycle debootstrap cannot order.
mount -t proc proc "$root/proc"
echo 'en_US.UTF-8 UTF-8' >"$root/etc/locale.gen"
chroot "$root" env DEBIAN_FRONTEND=noninteractive LANG=C sh -ec '
  locale-gen >/dev/null
  update-locale LANG=en_US.UTF-8
  apt-get install -y -q --no-install-recommends cloud-init netplan.io- >/dev/null
  apt-get clean
  rm -rf /var/lib/apt/lists/*'
umount "$root/proc"
# NoCloud only: no probing of cloud metadata services at boot.
echo 'datasource_list: [ NoCloud, None ]' >"$root/etc/cloud/cloud.cfg.d/90-muster.cfg"
cat >"$root/etc/network/interfaces" <<'IF'
auto lo
iface lo inet loopback
source /etc/network/interfaces.d/*
IF
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id" "$root/etc/hostname"

mkdir -p "$work/templates"
cat >"$work/metadata.yaml" <<META
architecture: $(dpkg --print-architecture)
creation_date: $(date +%s)
properties:
  description: muster Debian $suite with cloud-init
  os: debian
  release: $suite
  muster: "1"
templates:
  /var/lib/cloud/seed/nocloud-net/meta-data:
    when: [create, copy]
    template: meta-data.tpl
  /var/lib/cloud/seed/nocloud-net/user-data:
    when: [create, copy]
    template: user-data.tpl
  /var/lib/cloud/seed/nocloud-net/vendor-data:
    when: [create, copy]
    template: vendor-data.tpl
  /var/lib/cloud/seed/nocloud-net/network-config:
    when: [create, copy]
    template: network-config.tpl
  /etc/hostname:
    when: [create, copy]
    template: hostname.tpl
META
cat >"$work/templates/meta-data.tpl" <<'T'
instance-id: {{ container.name }}
local-hostname: {{ container.name }}
T
# (pongo2 string literals know no \n: the defaults are spelt out.)
cat >"$work/templates/user-data.tpl" <<'T'
{% if config_get("cloud-init.user-data", "") == "" %}#cloud-config
{}
{% else %}{{ config_get("cloud-init.user-data", "") }}
{% endif %}
T
cat >"$work/templates/vendor-data.tpl" <<'T'
{% if config_get("cloud-init.vendor-data", "") == "" %}#cloud-config
{}
{% else %}{{ config_get("cloud-init.vendor-data", "") }}
{% endif %}
T
cat >"$work/templates/network-config.tpl" <<'T'
{% if config_get("cloud-init.network-config", "") == "" %}version: 1
config:
  - type: physical
    name: eth0
    subnets:
      - type: dhcp
        control: auto
{% else %}{{ config_get("cloud-init.network-config", "") }}{% endif %}
T
echo '{{ container.name }}' >"$work/templates/hostname.tpl"
tar -C "$work" --numeric-owner -czf "$out.tmp" metadata.yaml templates rootfs
mv "$out.tmp" "$out"
