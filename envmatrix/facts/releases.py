"""The releases of a package as the user's pip sees them (`pip index versions`: pip's index settings,
mirrors and find-links honoured), for bisect."""

from __future__ import annotations

import re
import subprocess
import sys

from ..errors import InputError

#: The distribution behind each built-in axis that is a release on an index (cuda, gpu and python are not);
#: a package axis is its own distribution name.
PACKAGES = {"torch": "torch", "transformers": "transformers", "flash_attn": "flash-attn"}


def parse_pip_index_versions(text: str) -> list[str]:
    """The versions from `pip index versions` output; ValueError when it lists none."""
    match = re.search(r"^Available versions:\s*(.+)$", text, re.MULTILINE)
    if match is None:
        raise ValueError("no 'Available versions:' line")
    return [v.strip() for v in match.group(1).split(",") if v.strip()]


def available(axis: str, *, pre: bool = False, timeout: float = 120.0) -> list[str]:
    """Every release of the axis's package on the configured index; InputError when it cannot be listed."""
    dist = PACKAGES.get(axis, axis)
    cmd = [sys.executable, "-m", "pip", "index", "versions", dist, "--disable-pip-version-check"]
    if pre:
        cmd.append("--pre")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise InputError(f"listing {dist} releases with pip failed: {exc}; check pip's index settings (pip config list)") from None
    try:
        return parse_pip_index_versions(done.stdout)
    except ValueError:
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise InputError(f"pip index versions {dist} listed no releases ({detail[0][:200]}); check pip's index settings") from None
