#!/usr/bin/env bash
# Builds a minimal Debian bookworm root filesystem with debootstrap and imports it into
# Docker as $IMAGE (default bulwark-base:bookworm), for machines where no image can be
# pulled from a registry. With a registry, build deploy/Dockerfile on
# debian:bookworm-slim instead and skip this script.
#
# Idempotent: does nothing when the image exists (FORCE=1 rebuilds it).
# Needs root (debootstrap, docker); installs debootstrap with apt-get when missing.
#
#   IMAGE=bulwark-base:bookworm MIRROR=http://deb.debian.org/debian deploy/build-base-image.sh
set -euo pipefail

IMAGE=${IMAGE:-bulwark-base:bookworm}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}

if [ "${FORCE:-0}" != 1 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "base image $IMAGE exists (FORCE=1 rebuilds it)"
  exit 0
fi

SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
if ! command -v debootstrap >/dev/null; then
  echo "installing debootstrap"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq debootstrap >/dev/null
fi

ROOTFS=$(mktemp -d "${TMPDIR:-/tmp}/bulwark-rootfs.XXXXXX")
# The rootfs is owned by root: remove it with the same rights it was made with.
trap '$SUDO rm -rf --one-file-system "$ROOTFS"' EXIT

start=$(date +%s)
echo "debootstrap $SUITE (minbase) from $MIRROR into $ROOTFS"
$SUDO debootstrap --variant=minbase "$SUITE" "$ROOTFS" "$MIRROR" >"$ROOTFS.log" 2>&1 || {
  tail -n 30 "$ROOTFS.log"
  echo "debootstrap failed (full log: $ROOTFS.log)"
  exit 1
}
rm -f "$ROOTFS.log"

# What debian:bookworm-slim also leaves out: package lists, caches, docs, man pages.
$SUDO chroot "$ROOTFS" apt-get clean
$SUDO rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin \
  "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* \
  "$ROOTFS"/var/log/*.log "$ROOTFS"/tmp/*
printf 'deb %s %s main\n' "$MIRROR" "$SUITE" | $SUDO tee "$ROOTFS/etc/apt/sources.list" >/dev/null

$SUDO tar --numeric-owner -C "$ROOTFS" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["bash"]' \
  --message "debootstrap --variant=minbase $SUITE $MIRROR" \
  - "$IMAGE" >/dev/null
echo "built $IMAGE in $(($(date +%s) - start)) s: $(docker image inspect -f '{{.Size}}' "$IMAGE" | numfmt --to=iec)"
