#!/usr/bin/env bash
# A distribution release's bare root file system as a tar, for the GPU rehearsal's stand-in bases
# (tests/rehearsal): nvidia/cuda images cannot be pulled here, so the rehearsal builds on the same
# Ubuntu release made with debootstrap (minbase: no Python, as in nvidia/cuda's runtime images).
#   dockerfiles/standin-rootfs.sh SUITE OUT.tar [MIRROR]
# SUITE: jammy | noble (Ubuntu; the archive's signatures are not checked: debootstrap on Debian has no
# Ubuntu keyring, and the tar is a rehearsal's base, never a release's) or a Debian suite (checked).
set -euo pipefail
suite="$1"
out="$2"
case "$suite" in
  jammy | noble) mirror="${3:-http://archive.ubuntu.com/ubuntu}"; extra=(--no-check-gpg --components=main,universe); script=/usr/share/debootstrap/scripts/gutsy ;;
  bookworm | trixie) mirror="${3:-http://deb.debian.org/debian}"; extra=(); script="" ;;
  *) echo "standin-rootfs.sh: unknown suite '$suite' (jammy, noble, bookworm, trixie)" >&2; exit 2 ;;
esac
[ -s "$out" ] && { echo "$out exists"; exit 0; }
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase "${extra[@]}" "$suite" "$root" "$mirror" ${script:+"$script"} >"$out.log" 2>&1 || { tail -5 "$out.log" >&2; exit 1; }
# what apt needs in a container (no Ubuntu keyring: the stand-in trusts the archive it was made from)
case "$suite" in jammy | noble)
  printf 'deb [trusted=yes] %s %s main universe\ndeb [trusted=yes] %s %s-updates main universe\n' "$mirror" "$suite" "$mirror" "$suite" >"$root/etc/apt/sources.list";;
esac
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . >"$out.part"
mv "$out.part" "$out"
echo "$out: $suite root file system"
