#!/bin/sh
# A C/C++ compiler for what compiles at run time (Triton's launcher at the first kernel, torch's inductor,
# DeepSpeed's JIT ops):  compiler.sh 0|1 (0: nothing to do). Python's headers come with the Python step.
set -eu
[ "${1:-0}" = 1 ] || exit 0
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends gcc g++ libc6-dev >/dev/null
rm -rf /var/lib/apt/lists/*
gcc --version | head -1
