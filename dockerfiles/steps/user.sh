#!/bin/sh
# The probe's unprivileged user at uid 1000, on any base: a base that already has an account there
# (ubuntu:24.04 and the nvidia/cuda images on it ship `ubuntu`, uid 1000) keeps it, else `probe` is made.
# Cells run with the invoking user's uid either way; HOME is /home/probe, a tmpfs at run time.
set -eu
mkdir -p /home/probe
if getent passwd 1000 >/dev/null 2>&1; then
    echo "uid 1000 exists ($(getent passwd 1000 | cut -d: -f1)): kept"
else
    useradd --uid 1000 --home-dir /home/probe --no-create-home --shell /bin/sh probe
    echo "uid 1000: probe made"
fi
chown 1000 /home/probe
