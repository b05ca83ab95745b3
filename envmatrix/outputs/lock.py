"""A vetted environment → a lockfile of what actually ran: hashed requirements, PEP 751 pylock.toml,
the index settings used (and, for docker environments, the image). The pylock's `[tool.envmatrix]`
table says what the environment is vetted for and which attestations (by digest) that stands on.

Versions come from the freeze taken inside the environment, never from a fresh resolution; pip only
looks up the URL and sha256 of each exact pinned file (`pip install --dry-run --report`).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from ..errors import InputError
from ..facts import pkgconstraints
from ..host.pipconfig import TORCH_INDEX, PipSettings, read_pip_settings
from ..records.outcomes import Outcome
from ..records.provenance import Provenance
from ..records.record import BuildFacts, Record, Status
from . import require
from .vetting import Standing, best, standings, vetted_environments
from .writer import write_files

PYPI = "https://pypi.org/simple"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]{0,63}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def select_environment(
    records: list[Record], env_id: str | None, best_gpu: str | None, scenarios: list[str] | None = None, requires: list[Requirement] | None = None
) -> Standing:
    """The vetted environment named, or the newest one on a GPU type vetted for the workload (and satisfying every
    --require); a clear error otherwise, saying what rules each candidate out."""
    if best_gpu:
        choice, wanted, reasons = require.best_requiring(records, best_gpu, scenarios, requires) if requires else best(records, best_gpu, scenarios)
        if choice is not None:
            return choice
        if not reasons:
            raise InputError(f"--best {best_gpu}: no environment ran on {best_gpu} in the records; run the matrix there first (nox -s matrix)")
        if requires:
            raise InputError(f"--best {best_gpu}: {require.refusal(records, best_gpu, wanted, reasons, requires)}")
        why = "; ".join(f"{env}: {', '.join(r)}" for env, r in sorted(reasons.items()))
        raise InputError(f"--best {best_gpu}: no environment is vetted for {', '.join(wanted) or 'any scenario'}: {why}")
    for s in standings(records):
        if s.env == env_id:
            if s.vetted:
                return s
            raise InputError(f"{env_id} is vetted for nothing: {s.why_not()}; vetted: {', '.join(v.env for v in vetted_environments(records)) or 'none'}")
    known = {r.env for r in records}
    raise InputError(f"{env_id}: no records of a cell that ran in this environment; environments with records: {', '.join(sorted(known)) or 'none'}")


def _freeze_and_build(records: list[Record], env_id: str) -> tuple[list[str], BuildFacts]:
    for rec in records:
        if rec.env == env_id and rec.status == Status.DONE and rec.build is not None and rec.build.pins():
            return rec.build.pins(), rec.build
    raise InputError(f"{env_id}: its records hold no freeze of the environment (the host backend does not take one); run it with the venv or docker backend")


def index_differences(build: BuildFacts, mine: PipSettings) -> list[str]:
    """Where the record's package sources differ from this user's own pip settings."""
    diffs = []
    if build.index_url and build.index_url != (mine.index_url or PYPI):
        diffs.append(f"index-url {build.index_url} (yours: {mine.index_url or PYPI})")
    diffs += [f"extra-index-url {u}" for u in build.extra_index_urls if u not in mine.extra_index_urls and not u.startswith(TORCH_INDEX)]
    diffs += [f"find-links {f}" for f in build.find_links if f not in mine.find_links]
    return diffs


#: pip's words for a pin it finds no wheel of (with --only-binary :all:).
_NO_WHEEL = re.compile(r"No matching distribution found for ([A-Za-z0-9._-]+)==([A-Za-z0-9.+!_-]+)")


def pip_report(pins: list[str], build: BuildFacts) -> list[dict[str, str]]:
    """URL and sha256 of each pinned distribution, from the same indexes the environment used. Wheels through pip's
    report; a release published only as an sdist (DeepSpeed) by its index's JSON page (PEP 691), the sdist never built
    or run: pip never builds (runs) an sdist to answer."""
    rest: list[str] = list(pins)
    sdists: list[dict[str, str]] = []
    for _ in range(len(pins) + 1):
        try:
            return sorted(_wheel_report(rest, build) + sdists, key=lambda e: e["name"].lower())
        except _NoWheel as missing:
            name, version = missing.pin
            try:
                url, sha = pkgconstraints.sdist_url(name, version, build.index_url or PYPI)
            except (OSError, ValueError, KeyError) as exc:
                raise InputError(f"pip could not look up the pinned files: no wheel of {name}=={version}, and its sdist: {exc}") from None
            sdists.append({"name": name, "version": version, "url": url, "sha256": sha})
            rest = [p for p in rest if canonicalize_name(Requirement(p).name) != canonicalize_name(name)]
    raise InputError("pip could not look up the pinned files")


class _NoWheel(Exception):
    def __init__(self, pin: tuple[str, str]) -> None:
        super().__init__(f"{pin[0]}=={pin[1]}")
        self.pin = pin


def _wheel_report(pins: list[str], build: BuildFacts) -> list[dict[str, str]]:
    """URL and sha256 of each pinned wheel (pip's install report); _NoWheel naming the first pin with none."""
    if not pins:
        return []
    if importlib.util.find_spec("pip") is None:
        raise InputError(f"looking up the pinned files' hashes needs pip in {sys.executable}; install it (python -m ensurepip, or uv pip install pip)")
    args = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--ignore-installed",
        "--no-deps",
        "--only-binary",
        ":all:",
        "--quiet",
        "--disable-pip-version-check",
    ]
    if build.index_url:
        args += ["--index-url", build.index_url]
    for url in build.extra_index_urls:
        args += ["--extra-index-url", url]
    for link in build.find_links:
        args += ["--find-links", link]
    with tempfile.TemporaryDirectory() as tmp:
        reqs = Path(tmp) / "pins.txt"
        reqs.write_text("\n".join(pins) + "\n")
        report = Path(tmp) / "report.json"
        proc = subprocess.run([*args, "--report", str(report), "-r", str(reqs)], capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            if found := _NO_WHEEL.search(proc.stderr):
                raise _NoWheel((found.group(1), found.group(2)))
            raise InputError(f"pip could not look up the pinned files: {proc.stderr.strip()[-800:]}")
        data = json.loads(report.read_text())
    entries = []
    for item in data["install"]:
        info = item["download_info"]
        sha = ((info.get("archive_info") or {}).get("hashes") or {}).get("sha256")
        name, version = str(item["metadata"]["name"]), str(item["metadata"]["version"])
        if not sha or not _SHA256.fullmatch(sha):
            raise InputError(f"{name}: pip reported no sha256 for {info.get('url')}")
        if not _NAME.fullmatch(name) or not _VERSION.fullmatch(version) or any(c in str(info["url"]) for c in '\n\r "\\'):
            raise InputError(f"{name!r} {version!r}: pip reported a name, version or URL that cannot go into a lock file")
        entries.append({"name": name, "version": version, "url": str(info["url"]), "sha256": sha})
    return entries


def flash_entry(build: BuildFacts) -> dict[str, str] | None:
    """flash-attn as the record names it (its freeze line is a local file, which pip cannot look up): the
    wheel's own URL and the sha256 of the file installed; None without a wheel fetched from a URL."""
    facts = build.flash_attn or {}
    file, origin, sha = str(facts.get("file", "")), str(facts.get("origin", "")), str(facts.get("sha256", ""))
    parts = file.split("-")
    if not file.endswith(".whl") or len(parts) < 2 or not origin.startswith("https://") or not _SHA256.fullmatch(sha):
        return None
    if not _VERSION.fullmatch(parts[1]) or any(c in origin for c in '\n\r "\\'):
        return None
    return {"name": "flash-attn", "version": parts[1], "url": origin, "sha256": sha, "direct": "yes"}


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def requirements_lock(entries: list[dict[str, str]], env_id: str) -> str:
    """`name==version --hash=sha256:…` for every package: `pip install --require-hashes -r` installs it."""
    lines = [f"# envmatrix lock for {env_id}: the environment that ran, frozen inside it", "# install: pip install --require-hashes -r requirements.lock"]
    for e in entries:
        pin = f"{e['name']} @ {e['url']}" if e.get("direct") else f"{e['name']}=={e['version']}"  # a wheel by URL (flash-attn)
        lines.append(f"{pin} \\\n    --hash=sha256:{e['sha256']}")
    return "\n".join(lines) + "\n"


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(_toml_str(v) for v in values) + "]"


def stands_on(records: list[Record], choice: Standing) -> list[Record]:
    """The records an environment's vetting stands on: its healthy scenarios that were ok, and the controls
    that reproduced their failure on its detector stacks (in it or beside it: plan/vetrule.py)."""
    vetters = set(choice.vetted_by)
    done = [r for r in records if r.status == Status.DONE]
    controls = [r for r in done if r.expect and r.control == "reproduced" and r.cell.id in vetters]
    return [r for r in done if r.env == choice.env and r.workload and r.klass == Outcome.OK and r.cell.scenario in choice.scenarios] + controls


def envmatrix_table(choice: Standing, records: list[Record], provenance: Mapping[str, Provenance]) -> list[str]:
    """`[tool.envmatrix]`: the environment, what it is vetted for, and each attestation it stands on
    (the cell, the DSSE envelope's sha256, its signer, whether a trusted signer verified it, where it is)."""
    basis = stands_on(records, choice)
    controls = sorted(r.cell.scenario for r in basis if r.expect)
    out = [
        "[tool.envmatrix]",
        f"environment = {_toml_str(choice.env)}",
        f"gpu = {_toml_str(choice.gpu)}",
        f"vetted-for = {_toml_list(list(choice.scenarios))}",
        f"controls-reproduced = {_toml_list(controls)}",
    ]
    signed = [(r, p) for r in basis if (p := provenance.get(r.id)) is not None and p.attestation_sha256]
    if not signed:
        return [*out, "attestations = []", ""]
    out.append("")
    for rec, prov in sorted(signed, key=lambda pair: pair[0].id):
        out += ["[[tool.envmatrix.attestations]]", f"cell = {_toml_str(rec.id)}", f"sha256 = {_toml_str(str(prov.attestation_sha256))}"]
        out += [f"signer = {_toml_str(str(prov.signer))}", f"verified = {'true' if prov.verified else 'false'}"]
        if prov.attestation and prov.attestation.isascii() and prov.attestation.isprintable():  # a TOML basic string as json.dumps writes it
            out.append(f"url = {_toml_str(prov.attestation)}")
        out.append("")
    return out


def pylock_toml(entries: list[dict[str, str]], python: str, tool: list[str] | None = None) -> str:
    """A PEP 751 lock: one [[packages]] table per package, its wheel's URL and hash; then `tool` (the
    [tool.envmatrix] lines), which PEP 751 leaves to tools and installers ignore."""
    out = ['lock-version = "1.0"', f"requires-python = {_toml_str('==' + python + '.*')}", 'created-by = "envmatrix"', ""]
    for e in entries:
        filename = e["url"].rsplit("/", 1)[-1].replace("%2B", "+")
        kind = "wheels" if filename.endswith(".whl") else "sdist"
        out += ["[[packages]]", f"name = {_toml_str(e['name'])}", f"version = {_toml_str(e['version'])}"]
        if kind == "wheels":
            out += ["", "[[packages.wheels]]"]
        else:
            out += ["", "[packages.sdist]"]
        out += [f"name = {_toml_str(filename)}", f"url = {_toml_str(e['url'])}", f"hashes = {{sha256 = {_toml_str(e['sha256'])}}}", ""]
    return "\n".join(out + (tool or []))


def lock_folder(out_root: Path, env_id: str) -> Path:
    """OUT/locks/<env>/, refusing an id that would lead anywhere else."""
    locks = (out_root / "locks").resolve()
    folder = (locks / env_id).resolve()
    if not _NAME.fullmatch(env_id) or folder.parent != locks:
        raise InputError(f"{env_id!r}: not an environment id that can name a folder under {locks}")
    return folder


def write_lock(
    records: list[Record],
    out_root: Path,
    env_id: str | None = None,
    best_gpu: str | None = None,
    *,
    scenarios: list[str] | None = None,
    trust_record_indexes: bool = False,
    provenance: Mapping[str, Provenance] | None = None,
    requires: list[Requirement] | None = None,
) -> Path:
    """Write reports/locks/<env>/ for a vetted environment; return the folder.

    The package sources come from the record, which may come from another host: where they differ
    from this user's own pip settings, nothing is fetched unless the user trusts them explicitly."""
    choice = select_environment(records, env_id, best_gpu, scenarios, requires)
    folder = lock_folder(out_root, choice.env)
    pins, build = _freeze_and_build(records, choice.env)
    diffs = index_differences(build, read_pip_settings())
    if diffs and not trust_record_indexes:
        raise InputError(
            f"{choice.env}: its record names package sources that differ from your pip settings ({'; '.join(diffs)}); "
            "check them, then pass --trust-record-indexes to look the files up there"
        )
    flash = flash_entry(build)
    entries = sorted([*pip_report(pins, build), *([flash] if flash else [])], key=lambda e: e["name"].lower())
    folder.mkdir(parents=True, exist_ok=True)
    sources = {
        "environment": choice.as_dict(),
        "index_url": build.index_url,
        "extra_index_urls": list(build.extra_index_urls),
        "find_links": list(build.find_links),
        "tool": build.tool,
        "image": build.image,
        "base_image": build.base_image,
    }
    write_files(
        [
            (folder / "requirements.lock", requirements_lock(entries, choice.env)),
            (folder / "pylock.toml", pylock_toml(entries, choice.python, envmatrix_table(choice, records, provenance or {}))),
            (folder / "sources.json", json.dumps(sources, indent=2, default=str)),
        ],
        "a lock file",
    )
    return folder
