"""Ask a real resolver whether each environment's pins can be installed, and which files it would get.

The catalog is a lead; the package indexes are the truth. `uv pip compile --format pylock.toml`
resolves for the environment's Python and platform with the same requirements and index flags the
venv backend installs from, installs nothing, and prints every file's name, version, URL and sha256.
An environment that does not resolve gets the resolver's own message as its cells' skip reason. An
index that cannot be reached is an error naming it: a plan must not pretend to have checked.
Results are cached per (requirements, indexes, uv) so a second plan is instant.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import BackendError
from ..host.pipconfig import PipSettings, find_uv
from .cells import PLANNED, SKIPPED, Cell, Environment
from .install import Sources, install_set

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: Linux x86_64 with glibc 2.28: what torch ≥ 2.7 wheels need and what the Docker images provide.
PYTHON_PLATFORM = "x86_64-manylinux_2_28"
COMPILE_TIMEOUT_S = 300
REASON_MAX = 400
PROBE_TIMEOUT_S = 15
PYPI = "https://pypi.org/simple"
INDEX_FLAGS = ("--index-url", "--extra-index-url", "--find-links")
CACHE_VERSION = 1


@dataclass(frozen=True)
class ResolvedFile:
    """One file the resolver picked: what a lockfile and a record need to name it exactly."""

    name: str
    version: str
    url: str
    sha256: str


@dataclass(frozen=True)
class Resolution:
    """An environment's answer: the files, or why it does not resolve (the resolver's words)."""

    ok: bool
    files: tuple[ResolvedFile, ...] = ()
    reason: str = ""
    cached: bool = False

    def as_dict(self) -> dict[str, object]:
        """The JSON form (cache and `plan --format json`)."""
        return {"ok": self.ok, "reason": self.reason, "files": [vars(f) for f in self.files]}


@dataclass
class ResolveOutcome:
    """resolve_cells' result: cells with unresolvable environments skipped, answers per build id, and
    the indexes that could not be reached (their environments stay unchecked)."""

    cells: list[Cell]
    resolutions: dict[str, Resolution] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)


class IndexUnreachable(BackendError):
    """A package index did not answer: nothing about the environment is known."""

    def __init__(self, index: str, detail: str) -> None:
        self.index = index
        super().__init__(f"package index {index} could not be reached ({detail})")


def compile_command(uv: str, env: Environment, flags: Sequence[str]) -> list[str]:
    """`uv pip compile -` for the environment's target; requirements come on standard input."""
    return [
        uv, "pip", "compile", "-", "--format", "pylock.toml", "--no-header", "--quiet",
        "--python-version", env.python, "--python-platform", PYTHON_PLATFORM,
        "--index-strategy", "unsafe-best-match", *flags,
    ]  # fmt: skip


def parse_pylock(text: str) -> tuple[ResolvedFile, ...]:
    """Files from a pylock.toml: the wheel for the target where the resolver listed one, else the sdist."""
    files: list[ResolvedFile] = []
    for pkg in tomllib.loads(text).get("packages", []):
        candidates = [*pkg.get("wheels", []), *([pkg["sdist"]] if "sdist" in pkg else [])]
        chosen = candidates[0] if candidates else {"url": pkg.get("archive", {}).get("url", ""), "hashes": {}}
        files.append(ResolvedFile(pkg["name"], str(pkg["version"]), chosen.get("url", ""), chosen.get("hashes", {}).get("sha256", "")))
    return tuple(files)


_FETCH = re.compile(r"Failed to (?:fetch|download|query|read)[^:]*:\s*`?(\S+?)`?\s*$", re.M)


def unreachable_index(stderr: str, indexes: Iterable[str]) -> str | None:
    """The index a network failure names (the configured URL it falls under), or None if not a network failure."""
    if not re.search(r"Request failed|error sending request|dns error|Connect|timed out", stderr):
        return None
    match = _FETCH.search(stderr)
    url = match.group(1) if match else ""
    for index in sorted(indexes, key=len, reverse=True):
        if url.startswith(index.rstrip("/")):
            return index
    return re.sub(r"/[^/]+/?$", "", url) if url else "an index"


def trim_reason(stderr: str) -> str:
    """The resolver's message as one line a user acts on: its error and causes, no spinner or hints."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    keep = [re.sub(r"^(error|cause|╰─▶|×):?\s*", "", ln) for ln in lines if not ln.startswith(("hint", "warning", "Resolved"))]
    text = "uv: " + ": ".join(keep)
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


def cache_dir_default() -> Path:
    """~/.cache/envmatrix/resolve (XDG_CACHE_HOME respected)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envmatrix" / "resolve"


def _uv_environment() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("UV_")}


def env_flags(env: Environment, sources: Sources) -> tuple[list[str], list[str]]:
    """Requirements and every index flag uv gets for this environment: the install set the backends
    install (plan/install.py), after pip's own settings."""
    wanted = install_set(env, sources)
    return wanted.requirements, [*sources.pip.flags(), *wanted.source_flags]


def indexes_of(flags: Sequence[str], settings: PipSettings) -> list[str]:
    """The index URLs and find-links locations a resolution will read (PyPI unless replaced)."""
    named = [flags[i + 1] for i, f in enumerate(flags) if f in INDEX_FLAGS]
    default = [] if settings.index_url or os.environ.get("UV_INDEX_URL") or os.environ.get("UV_DEFAULT_INDEX") else [PYPI]
    return [*named, *default]


def index_problem(url: str, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why an index or find-links location cannot be read, or None: one quick request, so a missing
    network is reported in a second rather than after the resolver's retries (minutes per environment)."""
    if "://" not in url or url.startswith("file://"):
        return None if Path(url.removeprefix("file://")).exists() else "no such folder"
    try:
        urllib.request.urlopen(urllib.request.Request(url.rstrip("/") + "/", method="HEAD"), timeout=timeout).close()
    except urllib.error.HTTPError as exc:
        return None if exc.code < 500 else f"HTTP {exc.code}"  # a 404/405 is still a server answering
    except (urllib.error.URLError, OSError) as exc:
        return str(getattr(exc, "reason", exc))
    return None


def resolve_env(env: Environment, sources: Sources, *, uv: str, cache: Path | None) -> Resolution:
    """Resolve one environment (or read its cached answer); raises IndexUnreachable."""
    reqs, flags = env_flags(env, sources)
    wanted = install_set(env, sources)
    build_env = dict(wanted.build_env)  # an sdist's metadata is built as the install builds it
    cmd = compile_command(uv, env, flags)
    key_src = {"v": CACHE_VERSION, "cmd": cmd[1:], "reqs": reqs, "uv_env": _uv_environment(), "uv": uv, "build_env": build_env}
    if wanted.excludes:
        key_src["excludes"] = list(wanted.excludes)
    key = hashlib.sha256(json.dumps(key_src, sort_keys=True).encode()).hexdigest()[:24]
    path = cache / f"{key}.json" if cache else None
    if path and path.is_file():
        try:
            data = json.loads(path.read_text())
            files = tuple(ResolvedFile(**f) for f in data["files"])
            return Resolution(bool(data["ok"]), files, str(data["reason"]), cached=True)
        except (OSError, ValueError, KeyError, TypeError):
            pass  # a damaged entry is re-resolved and rewritten
    try:
        with tempfile.TemporaryDirectory() as folder:
            full, stdin = [*cmd, *wanted.exclude_flags(Path(folder))], "\n".join(reqs) + "\n"
            done = subprocess.run(full, input=stdin, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, env={**os.environ, **build_env})
    except subprocess.TimeoutExpired:
        raise IndexUnreachable(" ".join(flags) or "the default index", f"uv pip compile took over {COMPILE_TIMEOUT_S} s") from None
    except OSError as exc:
        raise BackendError(f"{uv}: cannot run the resolver: {exc}") from None
    if done.returncode == 0:
        result = Resolution(True, parse_pylock(done.stdout))
    else:
        index = unreachable_index(done.stderr, indexes_of(flags, sources.pip))
        if index is not None:
            raise IndexUnreachable(index, trim_reason(done.stderr).removeprefix("uv: ")[:200])
        if "No solution found" not in done.stderr and "not satisfiable" not in done.stderr:
            raise BackendError(f"uv pip compile failed for {env.build_id} (exit {done.returncode}): {trim_reason(done.stderr)}")
        result = Resolution(False, reason=trim_reason(done.stderr))
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(result.as_dict(), indent=1))
        tmp.replace(path)
    return result


def resolve_cells(cells: Sequence[Cell], sources: Sources, *, cache: Path | None = None, jobs: int = 4) -> ResolveOutcome:
    """Resolve every environment of the planned cells; unresolvable ones become skipped with the resolver's reason.

    Call it before a run builds anything. Unreachable indexes leave their environments' cells as
    they were and are listed in `unreachable` (build id → index); the caller decides to stop.
    """
    uv = find_uv()
    if uv is None:
        raise BackendError("resolving needs uv, which is not installed: python3 -m pip install uv (or pass --no-resolve)")
    cache = cache if cache is not None else cache_dir_default()
    envs = {c.env.build_id: c.env for c in cells if c.status == PLANNED}  # skipped and covered cells need no environment
    outcome = ResolveOutcome(list(cells))
    needs = {bid: indexes_of(env_flags(env, sources)[1], sources.pip) for bid, env in envs.items()}
    unique = sorted({url for urls in needs.values() for url in urls})
    with ThreadPoolExecutor(max_workers=8) as pool:
        problems = {url: p for url, p in zip(unique, pool.map(index_problem, unique), strict=True) if p}
    for bid, urls in needs.items():
        down = [u for u in urls if u in problems]
        if down:
            outcome.unreachable[bid] = f"{down[0]} ({problems[down[0]]})"
            envs.pop(bid)

    def one(env: Environment) -> tuple[str, Resolution | IndexUnreachable]:
        try:
            return env.build_id, resolve_env(env, sources, uv=uv, cache=cache)
        except IndexUnreachable as exc:
            return env.build_id, exc

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for build_id, answer in pool.map(one, envs.values()):
            if isinstance(answer, IndexUnreachable):
                outcome.unreachable[build_id] = answer.index
            else:
                outcome.resolutions[build_id] = answer
    for i, cell in enumerate(outcome.cells):
        got = outcome.resolutions.get(cell.env.build_id)
        if cell.status == PLANNED and got is not None and not got.ok:
            outcome.cells[i] = replace(cell, status=SKIPPED, reason=got.reason)
    return outcome


def unreachable_error(outcome: ResolveOutcome) -> BackendError:
    """One error naming every index that did not answer and the environments left unchecked."""
    indexes = sorted(set(outcome.unreachable.values()))
    return BackendError(
        f"could not reach package index {', '.join(indexes)} while resolving {len(outcome.unreachable)} environment(s)"
        f" ({', '.join(sorted(outcome.unreachable)[:3])}{', …' if len(outcome.unreachable) > 3 else ''}); nothing was built."
        " Check the network or the index settings (pip.conf, PIP_*/UV_* variables), or pass --no-resolve"
    )
