"""Where a flash-attn build comes from: the choice of sources a profile declares, tried in its order.

flash-attn is the one package whose file depends on the installed torch (version, CUDA major, C++
ABI), has no wheels on PyPI, and whose wheels vary in GPU coverage. So the source is explicit in
matrix.yaml (`flash_attn_sources`), the file is fetched to a known path before it is installed, and
its name, sha256 and origin go into the record's build facts.
"""

from __future__ import annotations

import hashlib
import shutil
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from . import catalog

RELEASES = "releases"
WHEELHOUSE = "wheelhouse"
SDIST = "sdist"
#: The sources a profile may list under `flash_attn_sources`, and what each means.
SOURCES: dict[str, str] = {
    RELEASES: "the official GitHub releases page: the wheel name the catalog predicts for the installed torch",
    WHEELHOUSE: "the profile's wheelhouse folder (find-links): vetted wheels a team keeps, community-built ones included",
    SDIST: "the PyPI sdist, built from source (hours; needs build_from_source: true)",
}
DEFAULT_SOURCES: tuple[str, ...] = (WHEELHOUSE, RELEASES)
RELEASES_URL = "https://github.com/Dao-AILab/flash-attention/releases/download"
FETCH_TIMEOUT_S = 600


class NoFlashSource(Exception):
    """None of the declared sources offers this flash-attn for this torch: the message lists what was tried."""


@dataclass(frozen=True)
class FlashChoice:
    """One source's offer: a wheel path or URL to install, or the sdist requirement to build."""

    source: str
    wheel: str
    location: str

    def install_args(self) -> list[str]:
        """Arguments for `pip install` / `uv pip install` after the tool's own flags."""
        if self.source == SDIST:
            return ["--no-build-isolation", f"flash-attn=={self.wheel}"]
        return [self.location]


def default_sources(wheelhouse: str | None, build_from_source: bool) -> list[str]:
    """Without `flash_attn_sources`: the wheelhouse when there is one, the releases page, the sdist when allowed."""
    return [*([WHEELHOUSE] if wheelhouse else []), RELEASES, *([SDIST] if build_from_source else [])]


def check_sources(sources: Sequence[str], *, wheelhouse: str | None, build_from_source: bool) -> list[str]:
    """Problems with a profile's `flash_attn_sources` (spec.py reports them with their path)."""
    problems = [f"unknown flash-attn source '{s}'; choose from {', '.join(SOURCES)}" for s in sources if s not in SOURCES]
    if WHEELHOUSE in sources and not wheelhouse:
        problems.append("source 'wheelhouse' needs the profile's wheelhouse: folder")
    if SDIST in sources and not build_from_source:
        problems.append("source 'sdist' builds from source (hours): allow it with build_from_source: true")
    if len(set(sources)) != len(sources):
        problems.append("a source is listed twice")
    return problems


def choose(release: str, *, torch: str, cuda: str, python: str, abi: bool, sources: tuple[str, ...], wheelhouse: Path | None) -> FlashChoice:
    """The first declared source that offers this release for the installed torch (read torch, CUDA and
    ABI from the environment, not the matrix); raises NoFlashSource naming each source and why not."""
    wheel = catalog.flash_wheel_name(release, torch, cuda, python, abi_flag=abi)
    tried: list[str] = []
    for source in sources:
        if source == WHEELHOUSE:
            path = (wheelhouse / wheel) if wheelhouse else None
            if path is not None and path.is_file():
                return FlashChoice(WHEELHOUSE, wheel, str(path))
            tried.append(f"wheelhouse {wheelhouse}: no {wheel}" if wheelhouse else "wheelhouse: the profile names none")
        elif source == RELEASES:
            missing = catalog.release_wheel_reasons(release, torch=torch, cuda=cuda, python=python)
            if not missing:
                return FlashChoice(RELEASES, wheel, f"{RELEASES_URL}/v{release}/{wheel}")
            tried.append(f"releases page: no {wheel} ({missing[0].split(';')[0]})")
        elif source == SDIST:
            return FlashChoice(SDIST, release, f"https://pypi.org/project/flash-attn/{release}/")
    raise NoFlashSource(f"flash-attn {release} for torch {torch} (CUDA {cuda}, cxx11abi {abi}, Python {python}): " + "; ".join(tried))


def fetch(choice: FlashChoice, folder: Path) -> Path | None:
    """Bring a releases-page wheel into `folder` (kept as a cache) so its sha256 is of the file installed;
    wheelhouse files are used in place; the sdist is fetched by the installer (None)."""
    if choice.source == WHEELHOUSE:
        return Path(choice.location)
    if choice.source != RELEASES:
        return None
    target = folder / choice.wheel
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".part")
    try:
        with urllib.request.urlopen(choice.location, timeout=FETCH_TIMEOUT_S) as resp, partial.open("wb") as out:
            shutil.copyfileobj(resp, out)
    except (urllib.error.URLError, OSError) as exc:
        partial.unlink(missing_ok=True)
        raise NoFlashSource(f"{choice.location}: {getattr(exc, 'reason', exc)}") from None
    partial.replace(target)
    return target


def sha256_of(path: Path) -> str:
    """The file's sha256, read in chunks (wheels are hundreds of MB)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def build_facts(choice: FlashChoice, local: Path | None) -> dict[str, str]:
    """What the record keeps: which file, its sha256 (of the installed file; empty for a source build), where from."""
    return {
        "file": choice.wheel if choice.source != SDIST else f"flash-attn-{choice.wheel} (sdist, built here)",
        "sha256": sha256_of(local) if local is not None else "",
        "source": choice.source,
        "origin": choice.location,
    }


#: Where the probe image's flash-attn step writes what it installed (dockerfiles/probe.Dockerfile): a line
#: `SOURCE FILE SHA256 ORIGIN`, then the path of its CUDA extension library.
IMAGE_RECORD = "/opt/envmatrix-flash-attn.txt"


def image_facts(text: str) -> tuple[dict[str, str], str | None]:
    """The image's record read back as build_facts writes a venv's (file, sha256, source, origin), and the
    extension library's path in the image (its GPU architectures are read from that file)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    words = lines[0].split() if lines else []
    if len(words) != 4 or words[0] not in SOURCES:
        raise ValueError(f"{IMAGE_RECORD}: expected 'SOURCE FILE SHA256 ORIGIN', got {text[:200]!r}")
    source, wheel, sha, origin = words
    if source == SDIST:
        release = wheel.removeprefix("flash-attn-")
        facts = {
            "file": f"flash-attn-{release} (sdist, built here)",
            "sha256": "",
            "source": source,
            "origin": f"https://pypi.org/project/flash-attn/{release}/",
        }
    else:
        facts = {"file": wheel, "sha256": sha, "source": source, "origin": origin}
    library = lines[1] if len(lines) > 1 and lines[1].startswith("/") and lines[1].endswith(".so") else None
    return facts, library
