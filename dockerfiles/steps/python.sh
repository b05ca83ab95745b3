#!/bin/sh
# The probe image's Python, into /opt/venv, on any base:  python.sh VERSION HEADERS(0|1)
#   the image's own python$VERSION when it has one; else its distribution's package when apt can install it
#   (`apt-get install --simulate`: a package the archive lists may still be uninstallable); else a uv-managed CPython (uv from PyPI, bootstrapped with the distribution's python3; its
#   interpreter from python-build-standalone, or UV_PYTHON_INSTALL_MIRROR). HEADERS=1 adds Python.h
#   (a compiler step follows: Triton and torch's inductor build C extensions at run time).
# How it was provided goes to /opt/envmatrix-python.txt (the build facts read it back).
set -eu
py="$1"
headers="${2:-0}"
case "$py" in 3.[0-9] | 3.[0-9][0-9]) ;; *) echo "python.sh: '$py' is not 3.MINOR" >&2; exit 2;; esac
export DEBIAN_FRONTEND=noninteractive
has_headers() { "python$py" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; }
how=image
if ! command -v "python$py" >/dev/null 2>&1; then
    how=none
    if command -v apt-get >/dev/null 2>&1; then
        apt-get update -qq
        # what apt can install, not what it lists: `apt-cache show` lists a package whose dependencies cannot be met
        pkgs="python$py python$py-venv ca-certificates"
        [ "$headers" = 1 ] && pkgs="$pkgs python$py-dev"
        # and not a pre-release: ubuntu 22.04 offers python3.11 3.11.0~rc1, on which torch's dynamo fails at import
        if said=$(apt-get install --simulate --no-install-recommends $pkgs 2>&1) \
            && offered=$(echo "$said" | sed -n "s/^Inst python$py (\([^ ]*\) .*/\1/p") \
            && case "$offered" in *~a[0-9]* | *~b[0-9]* | *~rc[0-9]*) said="E: apt offers python$py $offered, a pre-release"; false;; *) true;; esac; then
            apt-get install -y -qq --no-install-recommends $pkgs >/dev/null
            how=distribution
        else
            echo "python $py: apt cannot install it here ($(echo "$said" | grep -m1 '^E:' || echo "$said" | tail -1)): a uv-managed CPython instead"
        fi
    else
        echo "python $py: no apt here: a uv-managed CPython instead"
    fi
fi
if [ "$how" != none ]; then
    if [ "$headers" = 1 ] && ! has_headers; then
        apt-get update -qq && apt-get install -y -qq --no-install-recommends "python$py-dev" >/dev/null
    fi
    "python$py" -m venv /opt/venv
else
    command -v apt-get >/dev/null 2>&1 || { echo "python.sh: no python$py, no apt to bootstrap uv with: use a base with python3 (profile base_images)" >&2; exit 1; }
    apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates >/dev/null
    python3 -m venv /opt/uv
    /opt/uv/bin/pip install --quiet uv
    UV_PYTHON_INSTALL_DIR=/opt/python /opt/uv/bin/uv python install "$py"
    UV_PYTHON_INSTALL_DIR=/opt/python /opt/uv/bin/uv venv --seed --python "$py" /opt/venv
    chmod -R a+rX /opt/python
    how=uv
fi
rm -rf /var/lib/apt/lists/*
/opt/venv/bin/python -c "import sys; print(sys.version.split()[0])" >/dev/null
echo "$how" > /opt/envmatrix-python.txt
echo "python $py: $how"
