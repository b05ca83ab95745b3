"""Schedule cells onto slots, prepare each environment once, run, classify and record every cell.

One cell's crash, hang or kill ends in that cell's record; so does a backend's exception (a Docker API
error, a bug): the matrix goes on. The backend and the thread pool are always cleaned up (`with`), on
Ctrl-C (or SIGTERM) too, which kills the running cells and keeps every completed record; a re-run
skips cells whose record exists with unchanged inputs, so it completes only what is missing. Two
runners on the same cell take turns (a lock file per cell), so a record is never a mix of two runs.
"""

from __future__ import annotations

import datetime
import os
import platform
import signal
import threading
import traceback
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from .. import __version__
from ..backends import Backend, BuildFailed, Prepared
from ..errors import HostProblem, Interrupted
from ..facts import catalog, elfarch
from ..host import gpulease
from ..outputs.summary import cell_text
from ..plan.builds import Build, builds
from ..plan.cells import COVERED, SKIPPED, Cell
from ..plan.eligibility import host_reasons
from ..records.outcomes import Outcome, Verdict, decided, glyph
from ..records.record import (
    LogRef,
    Record,
    RecordError,
    RunnerInfo,
    Status,
    Timings,
    build_facts,
    cell_info,
    cell_stem,
    guarded,
    inputs_hash,
    log_tail,
    read_record,
    write_record,
)
from ..verdict.classify import classify, control_status, signal_number
from ..verdict.runfacts import gather
from . import execute
from .locking import exclusive

#: Outcomes that say more about the runner's settings or a passing cause than about the stack: a
#: record with one of them is never reused from the cache (the next run tries again).
NOT_FINAL = (Outcome.TIMEOUT, Outcome.BUILD_FAILED, Outcome.INCONCLUSIVE)
#: The rule of a verdict the runner gives when the backend raised before the probe could run: never reused either.
BACKEND_RULE = "backend"


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

    @property
    def locks(self) -> Path:
        return self.root / "results" / ".locks"


@dataclass
class RunReport:
    """What a matrix run did: the records it holds (new and cached) and what it left to others."""

    records: list[Record] = field(default_factory=list)
    ran: int = 0
    cached: int = 0
    covered: int = 0  # cells recorded with the outcome of the cell that ran for them (plan/cover.py)
    other_gpus: int = 0
    reaped: int = 0
    types: dict[str, tuple[int, ...]] = field(default_factory=dict)  # the GPU types whose cells it held, and their GPUs

    @property
    def types_text(self) -> str:
        """Which GPU types ran and on which GPUs, for the run's summary: `A100 on 2 GPUs (0,2), H20 on 2 GPUs (1,3)`."""
        said = (f"{gpu} on {len(ids)} GPU{'s' * (len(ids) != 1)} ({','.join(map(str, ids))})" if ids else f"{gpu} (no GPU)" for gpu, ids in self.types.items())
        return ", ".join(said)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


class GpuPool:
    """The whole GPUs of one type handed to slots, by nvidia-smi index: a DDP cell takes world-size GPUs at once."""

    def __init__(self, ids: Sequence[int]) -> None:
        self.ids = tuple(sorted(ids))
        self.free = list(self.ids)
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


#: What a runner without GPUs runs: the cpu cells.
CPU_ONLY: Mapping[str, Sequence[int]] = {"cpu": ()}
#: Environments prepared at once, beside the running cells: preparing the next overlaps with the cells
#: of the ones ready. A build is downloads and unpacking (bytecode is not compiled at install): two at a time,
#: so a large one (vLLM's, 3 GB) does not hold back the small ones queued behind it.
PREPARE_AT_ONCE = 2


def host_cores() -> int:
    """The cores this process may run on (its CPU affinity, a container's or a scheduler's limit)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_jobs(gpus: Mapping[str, Sequence[int]], cores: int | None = None) -> int:
    """Cells at once when --jobs is not given: what the host can carry. On a GPU host, its GPUs (of the types
    it runs; a cell takes world-size GPUs of its type); on a CPU, its cores (a cell takes one per rank, and
    its torch threads are the cores divided between the cells)."""
    gpu_count = sum(len(ids) for ids in gpus.values())
    return gpu_count if gpu_count else (cores or host_cores())


def thread_env(cores: int, jobs: int) -> dict[str, str]:
    """The torch threads of a single-rank CPU cell when `jobs` cells share `cores` (ranks take one each)."""
    return {"OMP_NUM_THREADS": str(max(1, cores // max(1, jobs)))}


class Runner:
    """Runs the cells of this host's GPU types on one backend, each cell on GPUs of its own type (a mixed
    host: A100 cells on the A100s, H20 cells on the H20s); the backend's kind is invisible here.
    `gpus`: matrix GPU type → the indexes of its GPUs (no indexes: cells without GPUs, e.g. cpu)."""

    def __init__(
        self,
        backend: Backend,
        paths: Paths,
        *,
        jobs: int | None = None,
        timeout: float = 600.0,
        rerun: bool = False,
        gpus: Mapping[str, Sequence[int]] = CPU_ONLY,
        console: Console | None = None,
    ) -> None:
        self.backend = backend
        self.paths = paths
        self.jobs = max(1, jobs if jobs is not None else default_jobs(gpus))
        self.cores = host_cores()
        self.core_pool = GpuPool(range(self.cores))  # CPU cells: one core per rank, as GPU cells take GPUs
        self.timeout = timeout
        self.rerun = rerun
        self.types = {gpu: tuple(ids) for gpu, ids in gpus.items()}
        self.pools = {gpu: GpuPool(ids) for gpu, ids in gpus.items() if ids}
        self.console = console or Console()
        self.probe_source = execute.probe_source()
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.prepared: dict[str, Prepared | BuildFailed] = {}
        self.build_locks: dict[str, threading.Lock] = {}
        self.tally: Counter[str] = Counter()
        self.gpu_locks = gpulease.LOCK_DIR  # where the runners of this host take turns on a GPU (host/gpulease.py)

    # ---- records ---------------------------------------------------------------------------------

    def record_path(self, cell_id: str) -> Path:
        return self.paths.results / f"{cell_stem(cell_id)}.json"

    def cached(self, cell: Cell) -> Record | None:
        """The existing record when its inputs are unchanged and its outcome is final (not --rerun)."""
        if self.rerun:
            return None
        try:
            record = read_record(self.record_path(cell.id))
        except RecordError:
            return None
        if record.inputs != inputs_hash(cell, self.probe_source, self.backend.name) or record.klass in NOT_FINAL or record.timed_out:
            return None
        if record.outcome.rule == BACKEND_RULE:  # the backend itself failed (a container the engine would not start): the host's, not the stack's
            return None
        return record

    def new_record(self, cell: Cell, status: Status, verdict: Verdict, **more: Any) -> Record:
        """A record of this runner for `cell`, with its verdict and control status."""
        return Record(
            cell=cell_info(cell),
            status=status,
            outcome=verdict,
            control=control_status(cell.scenario.expect, verdict.outcome) if status != Status.SKIPPED else None,
            inputs=inputs_hash(cell, self.probe_source, self.backend.name),
            backend=self.backend.name,
            runner=RunnerInfo(host=platform.node(), envmatrix=__version__, gpu_count=len(self.types.get(cell.env.gpu, ()))),
            finished=_now(),
            **more,
        )

    def skipped(self, cell: Cell, reason: str, rule: str) -> Record:
        return self.new_record(cell, Status.SKIPPED, decided(Outcome.SKIPPED, reason, rule), started=_now())

    # ---- environments ----------------------------------------------------------------------------

    def build_log(self, build: Build) -> Path:
        return self.paths.logs / "builds" / f"{build.build_id}.log"

    def prepare(self, build: Build) -> Prepared | BuildFailed:
        """Prepare a build once; every cell of it waits for the same result. Any exception of the
        backend becomes a BuildFailed for the build's cells, its traceback appended to the build log."""
        with self.lock:
            lock = self.build_locks.setdefault(build.build_id, threading.Lock())
        with lock:
            if build.build_id not in self.prepared:
                log = self.build_log(build)
                try:
                    self.prepared[build.build_id] = self.backend.prepare(build, log)
                except BuildFailed as exc:
                    self.prepared[build.build_id] = exc
                except HostProblem:
                    raise  # no environment can run on this host: the run stops (_run_all), nothing is recorded for it
                except Exception as exc:
                    _append_traceback(log, f"backend {self.backend.name} raised while preparing {build.build_id}")
                    self.prepared[build.build_id] = BuildFailed(f"backend {self.backend.name} raised {type(exc).__name__}: {exc}")
            return self.prepared[build.build_id]

    # ---- one cell --------------------------------------------------------------------------------

    def run_cell(self, cell: Cell, build: Build) -> Record | None:
        """Prepare (once), run, classify and record one cell; None when the run was interrupted."""
        if self.stopping.is_set():
            return None
        with exclusive(self.paths.locks / f"{cell_stem(cell.id)}.lock"):
            if not self.rerun and (record := self.cached(cell)) is not None:
                return record  # another runner finished it while this one waited
            record = self._run_locked(cell, build)
            if record is not None:
                write_record(self.record_path(cell.id), record)
            return record

    def _run_locked(self, cell: Cell, build: Build) -> Record | None:
        started = _now()
        ready = self.prepare(build)
        if isinstance(ready, BuildFailed):
            log = self.build_log(build)
            verdict = classify(gather(None, log, exit_code=None, build_failed=str(ready)))
            return self.new_record(cell, Status.BUILD_FAILED, verdict, started=started, log=LogRef(str(log), log_tail(log)))
        pool = self.pools.get(cell.env.gpu)
        if pool is not None and (lacking := host_reasons(cell.env, cell.scenario, len(pool.ids))):
            return self.skipped(cell, "; ".join(r.text for r in lacking), "runner")
        missing = _kernels_missing(ready, cell)
        if missing is not None:  # the wheel cannot run here: say so before any training starts
            return self.new_record(cell, Status.DONE, decided(Outcome.UNSUPPORTED_GPU, missing, "elf_archs"), started=started, build=build_facts(ready.facts))
        gpu_ids = pool.take(cell.scenario.world_size) if pool is not None else []
        cores = self.core_pool.take(min(cell.scenario.world_size, self.cores)) if pool is None else []
        if pool is None:  # a CPU cell: torch's threads are its share of the cores
            ready = replace(ready, env={**(ready.env or os.environ), **thread_env(self.cores, self.jobs)})
        try:
            with gpulease.held(gpu_ids, self.stopping, self.gpu_locks) as free:  # no other runner's cell on these GPUs
                if not free:
                    return None
                record = self._execute(cell, ready, gpu_ids, started)
        finally:
            if pool is not None:
                pool.give(gpu_ids)
            self.core_pool.give(cores)
        return None if self.stopping.is_set() else record  # killed by Ctrl-C: leave the cell for the re-run

    def _execute(self, cell: Cell, ready: Prepared, gpu_ids: list[int], started: str) -> Record:
        stem = cell_stem(cell.id)
        out = self.paths.runs / stem
        log = self.paths.logs / f"{stem}.log"
        for stale in ("result.json", "metrics.jsonl"):
            (out / stale).unlink(missing_ok=True)
        build = build_facts(ready.facts)
        common = {
            "started": started,
            "gpu_ids": tuple(gpu_ids),
            "build": build,
        }
        try:
            done = self.backend.run(ready, cell.scenario, out, log, timeout=self.timeout, gpu_ids=gpu_ids)
        except Exception as exc:
            _append_traceback(log, f"backend {self.backend.name} raised while running {cell.id}")
            verdict = decided(Outcome.ERROR, f"backend {self.backend.name} raised {type(exc).__name__}: {str(exc)[:300]}", BACKEND_RULE)
            timings = Timings(prepare_s=ready.seconds, prepare_reused=ready.reused)
            return self.new_record(cell, Status.DONE, verdict, timings=timings, log=LogRef(str(log), log_tail(log)), **common)
        facts = gather(out, log, exit_code=done.exit_code, timed_out=done.timed_out, freeze=build.pins())
        sig = signal_number(done.exit_code)
        return guarded(
            self.new_record(
                cell,
                Status.DONE,
                classify(facts),
                timings=Timings(prepare_s=ready.seconds, prepare_reused=ready.reused, probe_s=done.seconds),
                exit_code=done.exit_code,
                signal=_signal_name(sig),
                timed_out=done.timed_out,
                launch=done.launch,
                env_facts=facts.probe.env_as_written if facts.probe is not None else None,
                result=facts.result or {},
                metrics=facts.metrics,
                log=LogRef(str(log), log_tail(log)),
                **common,
            )
        )

    # ---- the matrix ------------------------------------------------------------------------------

    def run(self, cells: list[Cell]) -> RunReport:
        """Run every cell of this runner's GPU types; cells of other types are left for their own runners."""
        report = RunReport()
        mine = [c for c in cells if c.env.gpu in self.types]
        report.other_gpus = len(cells) - len(mine)
        report.types = {gpu: ids for gpu, ids in self.types.items() if any(c.env.gpu == gpu for c in mine)}
        todo: list[tuple[Cell, Build]] = []
        covered: list[Cell] = []
        by_build = {b.build_id: b for b in builds(mine)}
        for cell in mine:
            record = self.cached(cell) if cell.status != COVERED else None
            if cell.status == COVERED:
                covered.append(cell)  # recorded once the cell that covers it has its record
            elif record is not None:
                report.records.append(record)
                report.cached += 1
                self.tally[record.klass] += 1
            elif cell.status == SKIPPED:
                record = self.skipped(cell, cell.reason, ",".join(cell.kinds) or "plan")  # the rule: the eligibility kinds that skipped it
                write_record(self.record_path(cell.id), record)
                report.records.append(record)
                self.tally[Outcome.SKIPPED] += 1
            else:
                todo.append((cell, by_build[cell.env.build_id]))
        if todo:
            report.reaped = len(execute.reap_orphans(self.paths.runs))
            previous = signal.signal(signal.SIGTERM, _raise_interrupt) if threading.current_thread() is threading.main_thread() else None
            try:
                with self.backend:
                    self._run_all(todo, report)
            finally:
                if previous is not None:
                    signal.signal(signal.SIGTERM, previous)
        self._record_covered(covered, report)
        return report

    def _record_covered(self, covered: list[Cell], report: RunReport) -> None:
        """A record per covered cell: the outcome of the cell that ran for it (this run's or an earlier run's
        record), saying so; a cell whose coverer has no record here says that instead."""
        have = {r.id: r for r in report.records}
        for cell in covered:
            ran = have.get(cell.covered_by)
            if ran is None:
                try:
                    ran = read_record(self.record_path(cell.covered_by))
                except RecordError:
                    ran = None
            if ran is None:
                verdict = decided(Outcome.SKIPPED, f"{cell.reason}; that cell has no record here (another shard or runner runs it)", "covered")
                record = self.new_record(cell, Status.COVERED, verdict, started=_now(), covered_by=cell.covered_by)
                record = replace(record, control=None)
            else:
                said = f"as {ran.id}, which ran ({cell.reason.split(': ', 1)[-1]}): {ran.outcome.evidence}"
                verdict = replace(ran.outcome, evidence=said)
                record = replace(self.new_record(cell, Status.COVERED, verdict, started=_now(), covered_by=ran.id), control=ran.control)
            write_record(self.record_path(cell.id), record)
            report.records.append(record)
            report.covered += 1

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
        with (
            Progress(*columns, console=self.console, transient=False) as progress,
            ThreadPoolExecutor(max_workers=self.jobs) as pool,
            ThreadPoolExecutor(max_workers=PREPARE_AT_ONCE) as preparer,
        ):
            task = progress.add_task("matrix", total=len(todo), tally=self._tally())

            def job(cell: Cell, build: Build) -> Record | None:
                with self.lock:
                    running.add(cell.id)
                    progress.update(task, description=_short(running))
                try:
                    return self.run_cell(cell, build)
                finally:
                    with self.lock:
                        running.discard(cell.id)

            # Environments are prepared in the order their cells come, PREPARE_AT_ONCE at a time; the cells of
            # one are handed to the cell slots as soon as it is ready, while the next one is being prepared.
            cells_of: dict[str, list[tuple[Cell, Build]]] = {}
            for cell, build in todo:
                cells_of.setdefault(build.build_id, []).append((cell, build))
            ready: dict[Future[Any], str] = {preparer.submit(self.prepare, group[0][1]): bid for bid, group in cells_of.items()}
            pending: set[Future[Any]] = set(ready)
            try:
                while pending:
                    finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        if fut in ready:  # an environment is ready (or failed: its cells record that)
                            fut.result()  # raises only a HostProblem: every other failure is the build's record
                            pending |= {pool.submit(job, c, b) for c, b in cells_of[ready.pop(fut)]}
                            continue
                        record = fut.result()
                        if record is None:
                            continue
                        report.records.append(record)
                        report.ran += 1
                        self.tally[record.klass] += 1
                        progress.console.print(f"{cell_text(record):<34} {record.id}")
                        progress.update(task, advance=1, tally=self._tally(), description=_short(running))
            except HostProblem:
                self.stopping.set()
                self.backend.stop_all()
                preparer.shutdown(wait=False, cancel_futures=True)
                pool.shutdown(wait=True, cancel_futures=True)
                raise
            except KeyboardInterrupt:
                self.stopping.set()
                self.backend.stop_all()
                preparer.shutdown(wait=False, cancel_futures=True)
                pool.shutdown(wait=True, cancel_futures=True)
                raise Interrupted(
                    f"interrupted: {report.ran} cells recorded this run, {report.cached} cached; "
                    f"re-run the same command to complete the rest (records are in {self.paths.results})"
                ) from None

    def _tally(self) -> str:
        return " ".join(f"{glyph(k)}{k}:{v}" for k, v in sorted(self.tally.items()))


def _kernels_missing(ready: Prepared, cell: Cell) -> str | None:
    """Evidence that the environment's flash-attn binary has no kernels for the cell's GPU, read from
    the installed ELF (None when it covers it, or nothing could be read)."""
    flash = ready.facts.get("flash_attn")
    gpu = catalog.GPUS.get(cell.env.gpu)
    if not isinstance(flash, dict) or gpu is None:
        return None
    return elfarch.unsupported_for(flash.get("gpu_archs"), gpu.compute_capability, cell.env.gpu)


def _append_traceback(log: Path, headline: str) -> None:
    """The current exception's traceback at the end of a log: the evidence of a backend's failure."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as fh:
        fh.write(f"\n[envmatrix] {headline}\n{traceback.format_exc()}")


def _signal_name(num: int | None) -> str | None:
    if not num:
        return None
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"SIG{num}"


def _short(running: set[str]) -> str:
    if not running:
        return "matrix"
    first = sorted(running)[0]
    return first if len(running) == 1 else f"{first} (+{len(running) - 1})"


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
