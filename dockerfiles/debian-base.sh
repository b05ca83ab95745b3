#!/usr/bin/env bash
# Make the CPU probe's base image without a registry: a Debian root file system from Debian's own
# packages (debootstrap), with Python 3.11 and CA certificates, imported as envmatrix-base:bookworm.
#   dockerfiles/debian-base.sh [IMAGE_NAME] [MIRROR]
set -euo pipefail
name="${1:-envmatrix-base:bookworm}"
mirror="${2:-http://deb.debian.org/debian}"
if docker image inspect "$name" >/dev/null 2>&1; then
  echo "$name exists"
  exit 0
fi
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates bookworm "$root" "$mirror" >/dev/null
tar -C "$root" -c . | docker import - "$name" >/dev/null
echo "$name imported"
