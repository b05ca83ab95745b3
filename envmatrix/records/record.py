"""THE per-cell record: the one contract between running a cell and everything after it (report,
summary, vetting, lock, merging across hosts).

A record is a frozen, typed `Record`, written as one JSON file per cell, atomically, and read back only
through `Record.from_json`, which checks the record version and validates every field: records are
merged from other hosts, so a record file is untrusted input. Anything that reaches a file name, a
command line or a lock line (ids, versions, index URLs, frozen requirements) is checked against a
strict pattern here, once, and a bad record is skipped with a warning naming its file.

Several runners may write into one folder at once: each write goes to a unique temporary name and is
renamed into place, so a reader sees a whole record or none.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from probes import untrusted

from ..errors import InputError
from ..jsonio import read_json_bounded, write_json_atomic
from ..plan.cells import Cell
from .gpuguard import mismatch
from .outcomes import OUTCOME_NAMES, Named, Outcome, Verdict, decided
from .probe_result import EnvFacts, Fingerprint, ProbeResult, parse_env
from .schema import object_schema

#: The layout written now. Version 1 (envmatrix 0.1) files still load; newer ones are refused clearly.
RECORD_VERSION = 2
READABLE_VERSIONS = (1, 2)
LOG_TAIL_BYTES = 8192
#: A record file larger than this is not a record (a runaway log tail, /dev/zero behind a link).
MAX_RECORD_BYTES = untrusted.RECORD.max_bytes


class Status(Named):
    """How far a cell got (the record's `status`): not an outcome class, though two share a word with one."""

    DONE = "done"
    SKIPPED = "skipped"
    BUILD_FAILED = "build_failed"
    COVERED = "covered"  # not run: the outcome of the cell that ran for it (`covered_by`, plan/cover.py)


STATUSES: tuple[str, ...] = tuple(s.value for s in Status)
CONTROL_STATES = ("reproduced", "not reproduced")

# Patterns for the fields that reach file names, command lines and lock files (full match only).
_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
_CELL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}/[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
_VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+!-]{0,63}")
_URL = re.compile(r"(https?|file)://[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]{1,2000}")
_FREEZE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9][A-Za-z0-9._+!-]{0,63}")


class RecordError(InputError):
    """A record file that is not a valid record of a version this envmatrix reads."""


# ---- the typed record ------------------------------------------------------------------------------


#: The fault of the drift control (spec CHOICES["fault"]): it perturbs the numbers and is judged across cells.
DRIFT_FAULT = "drift"


@dataclass(frozen=True)
class CellInfo:
    """Which cell the record is of: its id, environment axes and scenario (with every setting)."""

    id: str
    env: str
    build: str
    cuda: str
    torch: str
    transformers: str
    flash_attn: str
    gpu: str
    python: str
    scenario: str
    expect: str | None = None
    status: str = "planned"
    reason: str = ""
    scenario_settings: Mapping[str, Any] = field(default_factory=dict)
    #: Extra package axes (name → version or `none`); absent from version-1 and older version-2 files.
    packages: Mapping[str, str] = field(default_factory=dict)

    def axes(self) -> dict[str, str]:
        """The environment axis values (AXES order)."""
        return {
            "cuda": self.cuda,
            "torch": self.torch,
            "transformers": self.transformers,
            "flash_attn": self.flash_attn,
            "gpu": self.gpu,
            "python": self.python,
        }


@dataclass(frozen=True)
class BuildFacts:
    """How the environment was made: tool, what it froze, and the index settings it installed from."""

    tool: str = "host"
    seconds: float | None = None
    inputs: str | None = None
    requirements: tuple[str, ...] = ()
    freeze: tuple[str, ...] = ()
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    image: str | None = None
    image_id: str | None = None
    base_image: str | None = None
    base_image_id: str | None = None
    build_args: Mapping[str, str] = field(default_factory=dict)
    flash_attn: Mapping[str, Any] | None = None  # the installed file, its sha256, source, origin and GPU archs
    python_from: str | None = None  # how the image got its Python (image, distribution, uv), read back from it

    def pins(self) -> list[str]:
        """The frozen `name==version` lines (editable and URL lines left out)."""
        return [line for line in self.freeze if _FREEZE.fullmatch(line)]


@dataclass(frozen=True)
class Timings:
    """Seconds spent preparing the environment (None: never prepared) and running the probe."""

    prepare_s: float | None = None
    prepare_reused: bool = False
    probe_s: float | None = None


@dataclass(frozen=True)
class RunnerInfo:
    """Which runner wrote the record."""

    host: str = ""
    envmatrix: str = ""
    gpu_count: int = 0


@dataclass(frozen=True)
class LogRef:
    """Where the cell's log is on the runner's host, and its last lines (the report shows them)."""

    path: str = ""
    tail: str = ""


@dataclass(frozen=True)
class Record:
    """One cell's run: what ran, how it ended, what it measured and how it was classified."""

    cell: CellInfo
    status: Status
    outcome: Verdict
    backend: str = ""
    inputs: str | None = None
    runner: RunnerInfo = field(default_factory=RunnerInfo)
    started: str | None = None
    finished: str | None = None
    timings: Timings = field(default_factory=Timings)
    exit_code: int | None = None
    signal: str | None = None
    timed_out: bool = False
    launch: str = ""  # how the probe was started (forked by the environment's helper, a process, torchrun…)
    gpu_ids: tuple[int, ...] = ()
    build: BuildFacts | None = None
    env_facts: Mapping[str, Any] | None = None
    result: Mapping[str, Any] = field(default_factory=dict)
    metrics: tuple[Mapping[str, Any], ...] = ()
    log: LogRef = field(default_factory=LogRef)
    control: str | None = None
    covered_by: str | None = None  # a covered cell's cell that ran: its outcome is this record's
    version: int = RECORD_VERSION

    # -- what the rest of envmatrix asks of a record ---------------------------------------------

    @property
    def id(self) -> str:
        return self.cell.id

    @property
    def env(self) -> str:
        return self.cell.env

    @property
    def klass(self) -> str:
        """The outcome class (`ok`, `nan_loss`, ...)."""
        return self.outcome.outcome.value

    @property
    def expect(self) -> str | None:
        return self.cell.expect

    @property
    def fault(self) -> str:
        """The fault the scenario injects (`none` for a plain one)."""
        return str(self.cell.scenario_settings.get("fault") or "none")

    @property
    def workload(self) -> bool:
        """A scenario that stands for a user's workload: it expects no class and is not the drift control (a fault that
        changes the numbers, no expected class: it trains cleanly yet vets nothing). Vetting, locks, checks and doctor
        count workloads only; a fault without `expect` is a workload that must train (doctor's broken-stack case)."""
        return not self.expect and self.fault != DRIFT_FAULT

    @cached_property
    def probe(self) -> ProbeResult:
        """The embedded result.json, read through its type (once per record)."""
        return ProbeResult.parse(dict(self.result), f"{self.id}: result")

    @cached_property
    def seen_env(self) -> EnvFacts | None:
        """What the probe reported of its environment and device (`environment.facts`), typed."""
        return parse_env(self.env_facts)

    @property
    def steps_completed(self) -> int | None:
        return self.probe.steps_completed

    @property
    def parity_rel_err(self) -> float | None:
        return self.probe.parity.rel_err if self.probe.parity else None

    @property
    def fingerprint(self) -> Fingerprint | None:
        """The numbers the probe computed on shared inputs (compared across environments: outputs/drift.py)."""
        return self.probe.fingerprint

    @property
    def probe_version(self) -> str | None:
        return self.probe.probe_version

    def metric(self, name: str) -> list[Any]:
        """One metric's values over the logged steps."""
        return [m.get(name) for m in self.metrics]

    # -- JSON ----------------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The record file's content (current version)."""
        cell = asdict(self.cell)
        cell["scenario_settings"] = dict(self.cell.scenario_settings)
        cell["packages"] = dict(self.cell.packages)
        return {
            "record_version": RECORD_VERSION,
            "cell": cell,
            "status": Status(self.status).value,
            "inputs": self.inputs,
            "backend": self.backend,
            "runner": asdict(self.runner),
            "started": self.started,
            "finished": self.finished,
            "timings": asdict(self.timings),
            "exit_code": self.exit_code,
            "signal": self.signal,
            "timed_out": self.timed_out,
            "launch": self.launch,
            "gpu_ids": list(self.gpu_ids),
            "environment": {"facts": _plain(self.env_facts), "build": _plain(asdict(self.build)) if self.build else None},
            "result": _plain(self.result),
            "metrics": [_plain(m) for m in self.metrics],
            "log": asdict(self.log),
            "outcome": self.outcome.as_dict(),
            "expect": self.cell.expect,
            "control": self.control,
            "covered_by": self.covered_by,
        }

    @classmethod
    def from_json(cls, data: Any, source: str = "record") -> Record:
        """A validated Record from a record file's content (version 1 or 2); RecordError otherwise.
        The GPU guard applies again: a record claiming a GPU its probe did not see is never ok."""
        return guarded(_parse(_Reader(source), data))


def guarded(record: Record) -> Record:
    """The record, or the record as `wrong_gpu` when its probe ran on another GPU type than the cell
    names (or did not say which, for a result that would otherwise count)."""
    counts = record.klass == Outcome.OK or record.control == "reproduced" or record.env_facts is not None
    if record.status != Status.DONE or not counts or record.klass == Outcome.WRONG_GPU:
        return record
    evidence = mismatch(record.cell.gpu, record.seen_env)
    if evidence is None:
        return record
    return replace(record, outcome=decided(Outcome.WRONG_GPU, evidence, "gpu_guard"), control="not reproduced" if record.expect else None)


def _plain(value: Any) -> Any:
    """Mappings and tuples back to JSON's dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


# ---- validation of untrusted record files ----------------------------------------------------------


class _Reader:
    """Typed reads of a JSON object that fail with the file and field path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> RecordError:
        return RecordError(f"{self.source}: {where}: {message}")

    def obj(self, data: Any, where: str, *, optional: bool = False) -> dict[str, Any]:
        if data is None and optional:
            return {}
        if not isinstance(data, dict):
            raise self.fail(where, f"expected an object, found {type(data).__name__}")
        return data

    def text(
        self, data: Mapping[str, Any], key: str, where: str, *, pattern: re.Pattern[str] | None = None, optional: bool = False, limit: int = 1 << 20
    ) -> Any:
        value = data.get(key)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise self.fail(f"{where}.{key}", f"expected a string, found {type(value).__name__}")
        if len(value) > limit:
            raise self.fail(f"{where}.{key}", f"longer than {limit} characters")
        if pattern is not None and not pattern.fullmatch(value):
            raise self.fail(f"{where}.{key}", f"{value[:80]!r} is not of the allowed form")
        return value

    def number(self, data: Mapping[str, Any], key: str, where: str, *, integer: bool = False) -> Any:
        value = data.get(key)
        if value is None:
            return None
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok or (isinstance(value, float) and not math.isfinite(value)):
            raise self.fail(f"{where}.{key}", f"expected a {'whole ' if integer else ''}number, found {value!r:.40}")
        return value

    def flag(self, data: Mapping[str, Any], key: str, where: str) -> bool:
        value = data.get(key, False)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise self.fail(f"{where}.{key}", f"expected true or false, found {value!r:.40}")
        return value

    def strings(self, data: Mapping[str, Any], key: str, where: str, pattern: re.Pattern[str] | None = None) -> tuple[str, ...]:
        value = data.get(key) or []
        if not isinstance(value, list) or len(value) > 10_000:
            raise self.fail(f"{where}.{key}", "expected a list of strings")
        for i, item in enumerate(value):
            if not isinstance(item, str) or (pattern is not None and not pattern.fullmatch(item)):
                raise self.fail(f"{where}.{key}[{i}]", f"{item!r:.80} is not of the allowed form")
        return tuple(value)


def _parse(r: _Reader, data: Any) -> Record:
    top = r.obj(data, "record")
    version = top.get("record_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise r.fail("record_version", "missing: not an envmatrix record")
    if version > RECORD_VERSION:
        raise r.fail("record_version", f"version {version} was written by a newer envmatrix (this one reads {READABLE_VERSIONS}); upgrade envmatrix")
    if version not in READABLE_VERSIONS:
        raise r.fail("record_version", f"version {version} is too old for this envmatrix (it reads {READABLE_VERSIONS}); run the cell again (--rerun)")
    cell = _cell(r, r.obj(top.get("cell"), "cell"))
    status = r.text(top, "status", "record")
    if status not in STATUSES:
        raise r.fail("status", f"{status!r:.40} is not one of {', '.join(STATUSES)}")
    out = r.obj(top.get("outcome"), "outcome")
    klass = r.text(out, "class", "outcome")
    if klass not in OUTCOME_NAMES:
        raise r.fail("outcome.class", f"{klass!r:.40} is not an outcome this envmatrix knows")
    verdict = Verdict.of(
        outcome=klass,
        evidence=r.text(out, "evidence", "outcome", optional=True) or "",
        remedy=r.text(out, "remedy", "outcome", optional=True) or "",
        rule=r.text(out, "rule", "outcome", optional=True) or "",
        also=tuple(a for a in r.strings(out, "also", "outcome") if a in OUTCOME_NAMES),
    )
    control = top.get("control")
    if control is not None and control not in CONTROL_STATES:
        raise r.fail("control", f"{control!r:.40} is not one of {', '.join(CONTROL_STATES)}")
    runner = r.obj(top.get("runner"), "runner", optional=True)
    timings = r.obj(top.get("timings"), "timings", optional=True)
    environment = r.obj(top.get("environment"), "environment", optional=True)
    log = r.obj(top.get("log"), "log", optional=True)
    metrics = top.get("metrics") or []
    if not isinstance(metrics, list) or not all(isinstance(m, dict) for m in metrics):
        raise r.fail("metrics", "expected a list of objects")
    gpu_ids = top.get("gpu_ids") or []
    if not isinstance(gpu_ids, list) or not all(isinstance(g, int) and not isinstance(g, bool) for g in gpu_ids):
        raise r.fail("gpu_ids", "expected a list of whole numbers")
    facts = environment.get("facts")
    return Record(
        version=version,
        cell=cell,
        status=Status(status),
        outcome=verdict,
        backend=r.text(top, "backend", "record", pattern=_TOKEN, optional=True) or "",
        inputs=r.text(top, "inputs", "record", pattern=_TOKEN, optional=True),
        runner=RunnerInfo(
            host=r.text(runner, "host", "runner", optional=True, limit=255) or "",
            envmatrix=r.text(runner, "envmatrix", "runner", optional=True, limit=64) or "",
            gpu_count=r.number(runner, "gpu_count", "runner", integer=True) or 0,
        ),
        started=r.text(top, "started", "record", optional=True, limit=64),
        finished=r.text(top, "finished", "record", optional=True, limit=64),
        timings=Timings(
            prepare_s=r.number(timings, "prepare_s", "timings"),
            prepare_reused=r.flag(timings, "prepare_reused", "timings"),
            probe_s=r.number(timings, "probe_s", "timings"),
        ),
        exit_code=r.number(top, "exit_code", "record", integer=True),
        signal=r.text(top, "signal", "record", pattern=_TOKEN, optional=True),
        timed_out=r.flag(top, "timed_out", "record"),
        launch=r.text(top, "launch", "record", optional=True, limit=2000) or "",
        gpu_ids=tuple(gpu_ids),
        build=_build(r, environment.get("build")),
        env_facts=r.obj(facts, "environment.facts") if facts is not None else None,
        result=r.obj(top.get("result"), "result", optional=True),
        metrics=tuple(metrics),
        log=LogRef(path=r.text(log, "path", "log", optional=True, limit=4096) or "", tail=r.text(log, "tail", "log", optional=True, limit=1 << 20) or ""),
        control=control,
        covered_by=r.text(top, "covered_by", "record", pattern=_CELL_ID, optional=True),
    )


def _cell(r: _Reader, c: dict[str, Any]) -> CellInfo:
    expect = r.text(c, "expect", "cell", optional=True)
    if expect is not None and expect not in OUTCOME_NAMES:
        raise r.fail("cell.expect", f"{expect!r:.40} is not an outcome")
    info = CellInfo(
        id=r.text(c, "id", "cell", pattern=_CELL_ID),
        env=r.text(c, "env", "cell", pattern=_TOKEN),
        build=r.text(c, "build", "cell", pattern=_TOKEN),
        cuda=r.text(c, "cuda", "cell", pattern=_VERSION),
        torch=r.text(c, "torch", "cell", pattern=_VERSION),
        transformers=r.text(c, "transformers", "cell", pattern=_VERSION),
        flash_attn=r.text(c, "flash_attn", "cell", pattern=_VERSION),
        gpu=r.text(c, "gpu", "cell", pattern=_TOKEN),
        python=r.text(c, "python", "cell", pattern=_VERSION),
        scenario=r.text(c, "scenario", "cell", pattern=_TOKEN),
        expect=expect,
        status=r.text(c, "status", "cell", pattern=_TOKEN, optional=True) or "planned",
        reason=r.text(c, "reason", "cell", optional=True, limit=8192) or "",
        scenario_settings=r.obj(c.get("scenario_settings"), "cell.scenario_settings", optional=True),
        packages=_packages(r, c.get("packages")),
    )
    if info.id != f"{info.env}/{info.scenario}":
        raise r.fail("cell.id", f"{info.id!r} is not <env>/<scenario> of this record ({info.env}/{info.scenario})")
    return info


def _packages(r: _Reader, data: Any) -> dict[str, str]:
    """Extra package pins: names and versions of the forms that may reach a lock or a command line."""
    packages = r.obj(data, "cell.packages", optional=True)
    for name, version in packages.items():
        if not _TOKEN.fullmatch(name) or not isinstance(version, str) or not _VERSION.fullmatch(version):
            raise r.fail(f"cell.packages.{name[:40]}", f"{version!r:.40} is not a package version")
    return packages


def _build(r: _Reader, data: Any) -> BuildFacts | None:
    if data is None:
        return None
    b = r.obj(data, "environment.build")
    where = "environment.build"
    args = r.obj(b.get("build_args"), f"{where}.build_args", optional=True)
    if not all(isinstance(v, str) for v in args.values()):
        raise r.fail(f"{where}.build_args", "expected string values")
    return BuildFacts(
        tool=r.text(b, "tool", where, pattern=_TOKEN, optional=True) or "host",
        seconds=r.number(b, "seconds", where),
        inputs=r.text(b, "inputs", where, pattern=_TOKEN, optional=True),
        requirements=r.strings(b, "requirements", where),
        freeze=r.strings(b, "freeze", where),
        index_url=r.text(b, "index_url", where, pattern=_URL, optional=True),
        extra_index_urls=r.strings(b, "extra_index_urls", where, _URL),
        find_links=r.strings(b, "find_links", where, re.compile(rf"{_URL.pattern}|/[A-Za-z0-9._/+-]{{0,1000}}")),
        image=r.text(b, "image", where, optional=True, limit=512),
        image_id=r.text(b, "image_id", where, optional=True, limit=512),
        base_image=r.text(b, "base_image", where, optional=True, limit=512),
        base_image_id=r.text(b, "base_image_id", where, optional=True, limit=512),
        build_args=args,
        flash_attn=_flash(r, b.get("flash_attn")),
        python_from=r.text(b, "python_from", where, pattern=_TOKEN, optional=True),
    )


def _flash(r: _Reader, data: Any) -> Mapping[str, Any] | None:
    if data is None:
        return None
    f = r.obj(data, "environment.build.flash_attn")
    for key in ("file", "sha256", "source", "origin"):
        r.text(f, key, "environment.build.flash_attn", optional=True, limit=4096)
    archs = r.obj(f.get("gpu_archs"), "environment.build.flash_attn.gpu_archs", optional=True)
    for kind in ("sass", "ptx"):
        values = archs.get(kind) or []
        if not isinstance(values, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise r.fail(f"environment.build.flash_attn.gpu_archs.{kind}", "expected a list of whole numbers")
    return f


def build_facts(raw: Mapping[str, object]) -> BuildFacts:
    """BuildFacts from what a backend reports (its own plain dict), through the same validation."""
    return _build(_Reader("backend build facts"), {k: list(v) if isinstance(v, tuple) else v for k, v in raw.items()}) or BuildFacts()


def cell_info(cell: Cell) -> CellInfo:
    """The record's view of a planned cell."""
    return CellInfo(
        id=cell.id,
        env=cell.env.id,
        build=cell.env.build_id,
        **cell.env.axes(),
        scenario=cell.scenario.name,
        expect=cell.scenario.expect,
        status=cell.status,
        reason=cell.reason,
        scenario_settings=asdict(cell.scenario),
        packages=dict(cell.env.packages),
    )


# ---- files -----------------------------------------------------------------------------------------


def cell_stem(cell_id: str) -> str:
    """A cell id as a file name: `env/scenario` → `env__scenario`."""
    return cell_id.replace("/", "__")


def inputs_hash(cell: Cell, probe_source: bytes, backend: str) -> str:
    """What a cached record depends on: environment, scenario, probe source and backend."""
    payload = json.dumps(
        {"env": cell.env.axes(), "scenario": asdict(cell.scenario), "probe": hashlib.sha256(probe_source).hexdigest(), "backend": backend},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def log_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    """The last `limit` bytes of a log as text, starting at a line boundary where possible."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            data = fh.read()
    except OSError:
        return ""
    if size > limit and b"\n" in data:
        data = data[data.index(b"\n") + 1 :]
    return data.decode("utf-8", "replace")


def write_record(path: Path, record: Record) -> None:
    """Atomically write one record file."""
    write_json_atomic(path, record.to_json())


def read_record(path: Path) -> Record:
    """One record file, validated: a regular file of bounded size holding a valid record; RecordError otherwise."""
    return Record.from_json(read_json_bounded(path, MAX_RECORD_BYTES, "a record", RecordError), str(path))


def record_from_bytes(raw: bytes, source: str) -> Record:
    """A record file's bytes read from elsewhere (a published site), validated as `read_record` validates a file."""
    if len(raw) > MAX_RECORD_BYTES:
        raise RecordError(f"{source}: {len(raw)} bytes, larger than a record can be ({MAX_RECORD_BYTES})")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise RecordError(f"{source}: not JSON (torn or not a record)") from None
    return Record.from_json(data, source)


def record_files(folder: Path) -> Iterator[Path]:
    """The record files of a results folder, in name order (hidden and temporary files left out)."""
    try:
        yield from sorted(p for p in folder.glob("*.json") if not p.name.startswith("."))
    except OSError:
        return


def load_records(*folders: Path, warn: Callable[[str], None] | None = None) -> list[Record]:
    """Every valid record in the folders (merging runners' results); a bad file is skipped, and
    `warn` is told which and why. A later folder's record of the same cell wins."""
    records: dict[str, Record] = {}
    for folder in folders:
        for path in record_files(folder):
            try:
                record = read_record(path)
            except RecordError as exc:
                if warn is not None:
                    warn(f"skipped {exc}")
                continue
            records[record.id] = record
    return list(records.values())


def with_outcome(record: Record, verdict: Verdict, control: str | None) -> Record:
    """The same record with another verdict (the report's re-classification, tests)."""
    return replace(record, outcome=verdict, control=control)


# ---- the published schema --------------------------------------------------------------------------

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "record.schema.json"


def json_schema() -> dict[str, Any]:
    """A JSON Schema of the record file, generated from the types above (published as record.schema.json)."""
    any_obj = {"type": "object"}
    str_or_null = {"type": ["string", "null"]}

    def obj(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {"type": "object", "properties": props, "required": required}

    str_map = {"type": "object", "additionalProperties": {"type": "string"}}
    cell = object_schema(CellInfo, {"scenario_settings": any_obj, "packages": str_map, "expect": {"enum": [*OUTCOME_NAMES, None]}})
    build = object_schema(BuildFacts, {"build_args": str_map, "flash_attn": {"type": ["object", "null"]}})
    outcome = obj(
        {
            "class": {"enum": list(OUTCOME_NAMES)},
            "evidence": {"type": "string"},
            "remedy": {"type": "string"},
            "rule": {"type": "string"},
            "also": {"type": "array", "items": {"enum": list(OUTCOME_NAMES)}},
        },
        ["class"],
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"envmatrix cell record, version {RECORD_VERSION}",
        "description": "One cell's run (environment × scenario): how it ended, what the probe measured, and its classification.",
        **obj(
            {
                "record_version": {"const": RECORD_VERSION},
                "cell": cell,
                "status": {"enum": list(STATUSES)},
                "inputs": str_or_null,
                "backend": {"type": "string"},
                "runner": object_schema(RunnerInfo),
                "started": str_or_null,
                "finished": str_or_null,
                "timings": object_schema(Timings),
                "exit_code": {"type": ["integer", "null"]},
                "signal": str_or_null,
                "timed_out": {"type": "boolean"},
                "launch": {"type": "string", "description": "how the probe was started: forked by the environment's helper, a process, torchrun, a container"},
                "gpu_ids": {"type": "array", "items": {"type": "integer"}},
                "environment": obj({"facts": {"type": ["object", "null"]}, "build": {"oneOf": [build, {"type": "null"}]}}, []),
                "result": {**any_obj, "description": "the probe's result.json as it wrote it (its own contract: probe-result.schema.json)"},
                "metrics": {"type": "array", "items": any_obj, "description": "metrics.jsonl rows: step, loss, grad_norm, reward, ..."},
                "log": object_schema(LogRef),
                "outcome": outcome,
                "expect": {"enum": [*OUTCOME_NAMES, None]},
                "control": {"enum": [*CONTROL_STATES, None]},
                "covered_by": {**str_or_null, "description": "a covered cell's cell that ran (its outcome is this record's)"},
            },
            ["record_version", "cell", "status", "outcome"],
        ),
    }


if __name__ == "__main__":  # python -m envmatrix.records.record > record.schema.json
    print(json.dumps(json_schema(), indent=2))
