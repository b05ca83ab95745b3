"""The first transformers release that knows a model_type, read from the released wheels themselves: a release
knows a model_type when its `models/auto/configuration_auto.py` maps it to a config class. Nothing is typed by
hand; the answer is found by a binary search over the releases the user's pip sees (support, once added, stays)
and kept in a cache file so each wheel is read once.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..jsonio import write_bytes_atomic
from . import releases

#: Where a release maps model_types to config classes: configuration_auto.py, and from 5.x the generated
#: auto_mappings.py it imports (a release has the files it has; each is read when present).
MAPPING_FILES = ("transformers/models/auto/configuration_auto.py", "transformers/models/auto/auto_mappings.py")


@dataclass(frozen=True)
class FirstRelease:
    """The answer: the first release that knows the type, the last one before it that does not (its proof), and
    how many wheels were read for it."""

    model_type: str
    first: str | None
    before: str | None
    read: int


def mapping_names(source: str) -> set[str]:
    """The model_types a mapping module maps to a config class: `("qwen3", "Qwen3Config"),` or `"mimi_decoder": "MimiDecoderConfig",`."""
    return set(re.findall(r'"([\w.-]+)"\s*[,:]\s*"\w+Config"', source))


def wheel_names(wheel: Path) -> set[str]:
    """Every model_type a transformers wheel maps (none for the 2.x/3.x layout, before the auto mapping by type)."""
    with zipfile.ZipFile(wheel) as zf:
        present = set(zf.namelist())
        return set().union(*(mapping_names(zf.read(f).decode("utf-8")) for f in MAPPING_FILES if f in present))


def stable(versions: Sequence[str]) -> list[str]:
    """Final releases, oldest first (pre-releases and unparsable versions left out)."""
    parsed = []
    for v in versions:
        try:
            version = Version(v)
        except InvalidVersion:
            continue
        if not version.is_prerelease and not version.is_devrelease:
            parsed.append((version, v))
    return [v for _, v in sorted(parsed)]


def search(model_type: str, versions: Sequence[str], knows: Callable[[str], bool]) -> FirstRelease:
    """Binary search for the first of `versions` (oldest first) that knows the type, asking `knows` per release."""
    read = 0

    def ask(v: str) -> bool:
        nonlocal read
        read += 1
        return knows(v)

    if not versions or not ask(versions[-1]):
        return FirstRelease(model_type, None, versions[-1] if versions else None, read)
    lo, hi = 0, len(versions) - 1  # invariant: versions[hi] knows it; every release before lo does not
    while lo < hi:
        mid = (lo + hi) // 2
        if ask(versions[mid]):
            hi = mid
        else:
            lo = mid + 1
    return FirstRelease(model_type, versions[hi], versions[hi - 1] if hi else None, read)


class WheelCache:
    """Which releases know which model_types, read from wheels downloaded with the user's pip (no dependencies,
    binary only) and remembered in a JSON file; the wheels themselves are not kept."""

    def __init__(self, path: Path, *, timeout: float = 600.0) -> None:
        self.path = path
        self.timeout = timeout
        self.known: dict[str, list[str]] = self._load()

    def _load(self) -> dict[str, list[str]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): [str(t) for t in v] for k, v in data.items() if isinstance(v, list)}

    def knows(self, version: str, model_type: str) -> bool:
        if version not in self.known:
            self.known[version] = sorted(self._read(version))
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(self.path, (json.dumps(self.known, indent=1, sort_keys=True) + "\n").encode())
        return model_type in self.known[version]

    def _read(self, version: str) -> set[str]:
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet", "--disable-pip-version-check"]
            subprocess.run([*cmd, "-d", tmp, f"transformers=={version}"], check=True, timeout=self.timeout, capture_output=True)
            return wheel_names(next(Path(tmp).glob("*.whl")))


def first_release(model_type: str, cache: Path) -> FirstRelease:
    """The first transformers release on the user's index that knows `model_type` (InputError when the index
    cannot be listed; subprocess errors when a wheel cannot be fetched)."""
    wheels = WheelCache(cache)
    return search(model_type, stable(releases.available("transformers")), lambda v: wheels.knows(v, model_type))
