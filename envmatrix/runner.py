"""Schedule cells onto slots, prepare each environment once, run, classify and record every cell.

One cell's crash, hang or kill ends in that cell's record; the matrix goes on. Ctrl-C (or SIGTERM)
kills the running cells' process groups and keeps every completed record; a re-run skips cells whose
record exists with unchanged inputs, so it completes only what is missing.
"""

from __future__ import annotations

import datetime
import platform
import signal
import threading
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from . import __version__, execute
from .backends import Backend, BuildFailed, Prepared
from .cells import SKIPPED, Cell
from .classify import REMEDIES, classify, control_status, signal_number
from .errors import Interrupted
from .jsonio import read_json, write_json_atomic
from .outcomes import glyph
from .plan import Build, builds
from .records import cell_stem, inputs_hash, log_tail
from .runfacts import gather
from .summary import cell_text


@dataclass(frozen=True)
class Paths:
    """Where a run writes: records, logs, probe outputs."""

    root: Path

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def runs(self) -> Path:
        return self.root / "runs"


@dataclass
class RunReport:
    """What a matrix run did: the records it holds (new and cached) and what it left to others."""

    records: list[dict[str, Any]] = field(default_factory=list)
    ran: int = 0
    cached: int = 0
    other_gpus: int = 0


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class GpuPool:
    """Whole GPUs handed to slots: a DDP cell takes world-size GPUs at once (CUDA_VISIBLE_DEVICES)."""

    def __init__(self, count: int) -> None:
        self.free = list(range(count))
        self.cond = threading.Condition()

    def take(self, n: int) -> list[int]:
        with self.cond:
            self.cond.wait_for(lambda: len(self.free) >= n)
            taken, self.free = self.free[:n], self.free[n:]
            return taken

    def give(self, ids: list[int]) -> None:
        with self.cond:
            self.free = sorted(self.free + ids)
            self.cond.notify_all()


class Runner:
    """Runs the cells of one GPU type on one backend; the backend's kind is invisible here."""

    def __init__(
        self,
        backend: Backend,
        paths: Paths,
        *,
        jobs: int = 1,
        timeout: float = 600.0,
        rerun: bool = False,
        gpu_count: int = 0,
        console: Console | None = None,
    ) -> None:
        self.backend = backend
        self.paths = paths
        self.jobs = max(1, jobs)
        self.timeout = timeout
        self.rerun = rerun
        self.gpus = GpuPool(gpu_count) if gpu_count else None
        self.gpu_count = gpu_count
        self.console = console or Console()
        self.probe_source = execute.PROBE.read_bytes()
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.prepared: dict[str, Prepared | BuildFailed] = {}
        self.build_locks: dict[str, threading.Lock] = {}
        self.tally: Counter[str] = Counter()

    # ---- records ---------------------------------------------------------------------------------

    def record_path(self, cell_id: str) -> Path:
        return self.paths.results / f"{cell_stem(cell_id)}.json"

    def cached(self, cell: Cell) -> dict[str, Any] | None:
        """The existing record when its inputs are unchanged (and --rerun was not given)."""
        if self.rerun:
            return None
        record = read_json(self.record_path(cell.id))
        if record and record.get("inputs") == inputs_hash(cell, self.probe_source, self.backend.name):
            return record
        return None

    def base_record(self, cell: Cell) -> dict[str, Any]:
        return {
            "record_version": 1,
            "cell": {**cell.as_dict(), "scenario_settings": asdict(cell.scenario)},
            "inputs": inputs_hash(cell, self.probe_source, self.backend.name),
            "backend": self.backend.name,
            "runner": {"host": platform.node(), "envmatrix": __version__, "gpu_count": self.gpu_count},
            "started": _now(),
        }

    def skipped_record(self, cell: Cell) -> dict[str, Any]:
        return {
            **self.base_record(cell),
            "status": "skipped",
            "finished": _now(),
            "outcome": {"class": "skipped", "evidence": cell.reason, "remedy": REMEDIES["skipped"], "rule": "catalog", "also": []},
            "control": None,
        }

    # ---- environments ----------------------------------------------------------------------------

    def prepare(self, build: Build) -> Prepared | BuildFailed:
        """Prepare a build once; every cell of it waits for the same result."""
        with self.lock:
            lock = self.build_locks.setdefault(build.build_id, threading.Lock())
        with lock:
            if build.build_id not in self.prepared:
                log = self.paths.logs / "builds" / f"{build.build_id}.log"
                try:
                    self.prepared[build.build_id] = self.backend.prepare(build, log)
                except BuildFailed as exc:
                    self.prepared[build.build_id] = exc
            return self.prepared[build.build_id]

    # ---- one cell --------------------------------------------------------------------------------

    def run_cell(self, cell: Cell, build: Build) -> dict[str, Any] | None:
        """Prepare (once), run, classify and record one cell; None when the run was interrupted."""
        if self.stopping.is_set():
            return None
        record = self.base_record(cell)
        ready = self.prepare(build)
        build_log = self.paths.logs / "builds" / f"{build.build_id}.log"
        if isinstance(ready, BuildFailed):
            facts = gather(None, build_log, exit_code=None, build_failed=str(ready))
            verdict = classify(facts)
            record.update(status="build_failed", timings={"prepare_s": None, "probe_s": None}, log={"path": str(build_log), "tail": log_tail(build_log)})
        else:
            if self.gpus is not None and cell.scenario.world_size > self.gpu_count:
                return self.write(
                    {
                        **self.skipped_record(cell),
                        "outcome": {
                            "class": "skipped",
                            "evidence": f"needs {cell.scenario.world_size} GPUs; this runner has {self.gpu_count}",
                            "remedy": REMEDIES["skipped"],
                            "rule": "runner",
                            "also": [],
                        },
                    }
                )
            gpu_ids = self.gpus.take(cell.scenario.world_size) if self.gpus is not None else []
            try:
                verdict, record = self._execute(cell, ready, record, gpu_ids)
            finally:
                if self.gpus is not None:
                    self.gpus.give(gpu_ids)
            if self.stopping.is_set():
                return None  # killed by Ctrl-C: not a result, leave the cell for the re-run
        record.update(finished=_now(), outcome=verdict.as_dict(), expect=cell.scenario.expect, control=control_status(cell.scenario.expect, verdict.outcome))
        return self.write(record)

    def _execute(self, cell: Cell, ready: Prepared, record: dict[str, Any], gpu_ids: list[int]) -> tuple[Any, dict[str, Any]]:
        stem = cell_stem(cell.id)
        out = self.paths.runs / stem
        log = self.paths.logs / f"{stem}.log"
        for stale in ("result.json", "metrics.jsonl"):
            (out / stale).unlink(missing_ok=True)
        done = self.backend.run(ready, cell.scenario, out, log, timeout=self.timeout, gpu_ids=gpu_ids)
        facts = gather(out, log, exit_code=done.exit_code, timed_out=done.timed_out)
        sig = signal_number(done.exit_code)
        result = facts.result or {}
        record.update(
            status="done",
            timings={"prepare_s": ready.seconds, "prepare_reused": ready.reused, "probe_s": done.seconds},
            exit_code=done.exit_code,
            signal=signal.Signals(sig).name if sig else None,
            timed_out=done.timed_out,
            gpu_ids=gpu_ids,
            environment={"facts": result.get("env"), "build": ready.facts},
            result=result,
            metrics=list(facts.metrics),
            log={"path": str(log), "tail": log_tail(log)},
        )
        return classify(facts), record

    def write(self, record: dict[str, Any]) -> dict[str, Any]:
        write_json_atomic(self.record_path(record["cell"]["id"]), record)
        return record

    # ---- the matrix ------------------------------------------------------------------------------

    def run(self, cells: list[Cell], gpu: str) -> RunReport:
        """Run every cell of `gpu`; cells of other GPU types are left for their own runners."""
        report = RunReport()
        mine = [c for c in cells if c.env.gpu == gpu]
        report.other_gpus = len(cells) - len(mine)
        todo: list[tuple[Cell, Build]] = []
        by_build = {b.build_id: b for b in builds(mine)}
        for cell in mine:
            record = self.cached(cell)
            if record is not None:
                report.records.append(record)
                report.cached += 1
                self.tally[record["outcome"]["class"]] += 1
            elif cell.status == SKIPPED:
                report.records.append(self.write(self.skipped_record(cell)))
                self.tally["skipped"] += 1
            else:
                todo.append((cell, by_build[cell.env.build_id]))
        if not todo:
            return report
        previous = signal.signal(signal.SIGTERM, _raise_interrupt) if threading.current_thread() is threading.main_thread() else None
        try:
            self._run_all(todo, report)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        return report

    def _run_all(self, todo: list[tuple[Cell, Build]], report: RunReport) -> None:
        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[tally]}"),
        )
        running: set[str] = set()
        with Progress(*columns, console=self.console, transient=False) as progress:
            task = progress.add_task("matrix", total=len(todo), tally=self._tally())
            pool = ThreadPoolExecutor(max_workers=self.jobs)

            def job(cell: Cell, build: Build) -> dict[str, Any] | None:
                with self.lock:
                    running.add(cell.id)
                    progress.update(task, description=_short(running))
                try:
                    return self.run_cell(cell, build)
                finally:
                    with self.lock:
                        running.discard(cell.id)

            futures: dict[Future[dict[str, Any] | None], Cell] = {pool.submit(job, c, b): c for c, b in todo}
            try:
                pending = set(futures)
                while pending:
                    finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        record = fut.result()
                        if record is None:
                            continue
                        report.records.append(record)
                        report.ran += 1
                        outcome = record["outcome"]["class"]
                        self.tally[outcome] += 1
                        progress.console.print(f"{cell_text(record):<34} {record['cell']['id']}")
                        progress.update(task, advance=1, tally=self._tally(), description=_short(running))
            except KeyboardInterrupt:
                self.stopping.set()
                self.backend.stop_all()
                pool.shutdown(wait=True, cancel_futures=True)
                raise Interrupted(
                    f"interrupted: {report.ran} cells recorded this run, {report.cached} cached; "
                    f"re-run the same command to complete the rest (records are in {self.paths.results})"
                ) from None
            pool.shutdown(wait=True)

    def _tally(self) -> str:
        return " ".join(f"{glyph(k)}{k}:{v}" for k, v in sorted(self.tally.items()))


def _short(running: set[str]) -> str:
    if not running:
        return "matrix"
    first = sorted(running)[0]
    return first if len(running) == 1 else f"{first} (+{len(running) - 1})"


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
