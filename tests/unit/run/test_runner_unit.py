"""The runner with a fake backend: caching, GPU slots, build failures, backend exceptions, Ctrl-C.

The fake backend writes what a probe would (result.json, metrics.jsonl, a log) without torch, so the
runner's own logic is tested in milliseconds; the real backends have integration tests.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import TracebackType

import pytest
from records_factory import device_facts
from rich.console import Console

from envmatrix.backends import BuildFailed, Prepared
from envmatrix.errors import Interrupted
from envmatrix.plan.builds import Build
from envmatrix.plan.cells import Cell, Environment
from envmatrix.records.record import read_record
from envmatrix.run.execute import Completed
from envmatrix.run.runner import Paths, Runner
from envmatrix.spec.matrix import Scenario

HEALTHY_METRICS = [{"step": i, "loss": 0.1, "grad_norm": 0.5} for i in (1, 2, 3)]


def env(transformers: str = "4.57.6", gpu: str = "cpu") -> Environment:
    return Environment(cuda="none", torch="2.13.0", transformers=transformers, flash_attn="none", gpu=gpu, python="3.11")


def cells(*envs: Environment, scenarios: tuple[Scenario, ...] = (Scenario("fp32-sdpa"),)) -> list[Cell]:
    return [Cell(e, s) for e in envs for s in scenarios]


class FakeBackend:
    """Records every call; `fail_prepare` / `raise_prepare` / `raise_run` choose what goes wrong where."""

    name = "fake"

    def __init__(self, *, fail_prepare: set[str] = frozenset(), raise_prepare: set[str] = frozenset(), raise_run: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        self.fail_prepare, self.raise_prepare, self.raise_run = fail_prepare, raise_prepare, raise_run
        self.prepared: list[str] = []
        self.ran: list[tuple[str, list[int]]] = []
        self.entered = self.exited = 0
        self.stopped = 0
        self.delay = 0.0
        self.seen = "cpu"  # the device the fake probe reports
        self.lock = threading.Lock()

    def __enter__(self) -> FakeBackend:
        self.entered += 1
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.exited += 1

    def prepare(self, build: Build, log: Path) -> Prepared:
        self.prepared.append(build.build_id)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("preparing\n")
        if build.env.transformers in self.fail_prepare:
            raise BuildFailed(f"{build.build_id}: install transformers failed")
        if build.env.transformers in self.raise_prepare:
            raise RuntimeError("docker API said no")
        return Prepared(python="python", seconds=0.1, reused=False, facts={"tool": "fake", "freeze": ["six==1.16.0"]})

    def run(self, ready: Prepared, scenario: Scenario, out: Path, log: Path, *, timeout: float, gpu_ids: list[int]) -> Completed:
        with self.lock:
            self.ran.append((scenario.name, gpu_ids))
        if scenario.name in self.raise_run:
            raise ConnectionError("engine went away")
        time.sleep(self.delay)
        out.mkdir(parents=True, exist_ok=True)
        result = {
            "env": device_facts(self.seen),
            "probe_version": "2",
            "finished": True,
            "steps_completed": 3,
            "stage": "done",
            "params": {"trainable": 2, "with_grad": 2, "changed": 2},
        }
        (out / "result.json").write_text(json.dumps(result))
        (out / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in HEALTHY_METRICS))
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("".join(json.dumps(m) + "\n" for m in HEALTHY_METRICS))
        return Completed(0, False, 0.01)

    def stop_all(self) -> None:
        self.stopped += 1


def runner(tmp_path: Path, backend: FakeBackend, **kw: object) -> Runner:
    return Runner(backend, Paths(tmp_path), console=Console(file=open("/dev/null", "w")), **kw)  # type: ignore[arg-type]


def test_runs_records_and_caches(tmp_path: Path) -> None:
    backend = FakeBackend()
    plan = cells(env(), env("5.23.0"), scenarios=(Scenario("a"), Scenario("b")))
    report = runner(tmp_path, backend).run(plan, "cpu")
    assert report.ran == 4 and report.cached == 0
    assert sorted(backend.prepared) == sorted({c.env.build_id for c in plan})  # each environment once
    assert backend.entered == backend.exited == 1
    assert {r.klass for r in report.records} == {"ok"}
    again = runner(tmp_path, backend).run(plan, "cpu")
    assert again.ran == 0 and again.cached == 4
    rerun = runner(tmp_path, backend, rerun=True).run(plan, "cpu")
    assert rerun.ran == 4


def test_build_failure_records_every_cell_of_that_environment(tmp_path: Path) -> None:
    backend = FakeBackend(fail_prepare={"4.51.3"})
    plan = cells(env(), env("4.51.3"), scenarios=(Scenario("a"), Scenario("b"), Scenario("c")))
    report = runner(tmp_path, backend).run(plan, "cpu")
    failed = [r for r in report.records if r.status == "build_failed"]
    assert len(report.records) == 6 and len(failed) == 3
    assert all(r.klass == "build_failed" and "install transformers failed" in r.outcome.evidence for r in failed)
    assert backend.prepared.count(env("4.51.3").build_id) == 1  # not once per cell
    assert runner(tmp_path, backend).run(plan, "cpu").ran == 3  # a failed build is not final: tried again


def test_backend_exceptions_become_records_and_the_matrix_goes_on(tmp_path: Path) -> None:
    backend = FakeBackend(raise_prepare={"4.51.3"}, raise_run={"b"})
    plan = cells(env(), env("4.51.3"), scenarios=(Scenario("a"), Scenario("b")))
    report = runner(tmp_path, backend).run(plan, "cpu")
    by = {(r.cell.transformers, r.cell.scenario): r for r in report.records}
    assert len(by) == 4
    assert by[("4.51.3", "a")].klass == by[("4.51.3", "b")].klass == "build_failed"
    assert "RuntimeError: docker API said no" in by[("4.51.3", "a")].outcome.evidence
    assert "Traceback" in (tmp_path / "logs" / "builds" / f"{env('4.51.3').build_id}.log").read_text()
    assert by[("4.57.6", "b")].klass == "error" and "ConnectionError" in by[("4.57.6", "b")].outcome.evidence
    assert "Traceback" in by[("4.57.6", "b")].log.tail
    assert by[("4.57.6", "a")].klass == "ok"
    assert backend.exited == 1
    for rec in report.records:  # every record is on disk and reads back
        assert read_record(tmp_path / "results" / f"{rec.id.replace('/', '__')}.json") == rec


def test_gpu_slots_and_world_size(tmp_path: Path) -> None:
    backend = FakeBackend()
    backend.seen = "A100"
    ddp4 = Scenario("ddp4", world_size=4)
    plan = cells(env(gpu="A100"), scenarios=(Scenario("one"), Scenario("ddp2", world_size=2), ddp4))
    report = runner(tmp_path, backend, gpu_count=2, jobs=2).run(plan, "A100")
    by = {r.cell.scenario: r for r in report.records}
    assert by["ddp4"].klass == "skipped" and "needs 4 GPUs" in by["ddp4"].outcome.evidence
    gpus = dict(backend.ran)
    assert len(gpus["one"]) == 1 and sorted(gpus["ddp2"]) == [0, 1]


def test_a_probe_on_another_gpu_is_wrong_gpu(tmp_path: Path) -> None:
    backend = FakeBackend()
    backend.seen = "A100"
    (rec,) = runner(tmp_path, backend, gpu_count=1).run(cells(env(gpu="H20")), "H20").records
    assert rec.klass == "wrong_gpu" and "A100" in rec.outcome.evidence


def test_other_gpu_types_are_left(tmp_path: Path) -> None:
    report = runner(tmp_path, FakeBackend()).run(cells(env(gpu="cpu"), env(gpu="H20")), "cpu")
    assert report.other_gpus == 1 and len(report.records) == 1


def test_skipped_cells_are_recorded_by_classify(tmp_path: Path) -> None:
    plan = [Cell(env(), Scenario("x"), status="skipped", reason="no wheel")]
    report = runner(tmp_path, FakeBackend()).run(plan, "cpu")
    (rec,) = report.records
    assert rec.status == "skipped" and rec.klass == "skipped" and rec.outcome.evidence == "no wheel" and rec.outcome.remedy


def test_a_skipped_record_names_the_eligibility_kinds_that_skipped_it(tmp_path: Path) -> None:
    plan = [Cell(env(), Scenario("x"), status="skipped", reason="needs trl; excluded by rule 3", kinds=("needs", "excluded"))]
    (rec,) = runner(tmp_path, FakeBackend()).run(plan, "cpu").records
    assert rec.outcome.rule == "needs,excluded"  # reports fold not-applicable cells by it


def test_cancelled_run_keeps_completed_records_and_cleans_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = FakeBackend()
    backend.delay = 0.3
    plan = cells(env(), scenarios=tuple(Scenario(f"s{i}") for i in range(6)))
    r = runner(tmp_path, backend)
    calls = {"n": 0}
    real_wait = __import__("envmatrix.run.runner", fromlist=["wait"]).wait

    def interrupting_wait(*a: object, **kw: object) -> object:
        calls["n"] += 1
        if calls["n"] > 3:
            raise KeyboardInterrupt
        return real_wait(*a, **kw)

    monkeypatch.setattr("envmatrix.run.runner.wait", interrupting_wait)
    with pytest.raises(Interrupted, match="re-run the same command"):
        r.run(plan, "cpu")
    assert backend.stopped >= 1 and backend.exited == 1
    written = list((tmp_path / "results").glob("*.json"))
    assert 0 < len(written) < 6  # some completed and were kept, the rest left for the re-run
    monkeypatch.undo()
    again = runner(tmp_path, backend).run(plan, "cpu")
    assert again.cached == len(written) and again.ran == 6 - len(written)


def test_timeouts_are_not_cached_as_final(tmp_path: Path) -> None:
    class Hanging(FakeBackend):
        def run(self, ready: Prepared, scenario: Scenario, out: Path, log: Path, *, timeout: float, gpu_ids: list[int]) -> Completed:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("step 1\n")
            return Completed(-9, True, timeout)

    plan = cells(env())
    first = runner(tmp_path, Hanging(), timeout=1).run(plan, "cpu")
    assert first.records[0].klass == "timeout"
    second = runner(tmp_path, FakeBackend(), timeout=600).run(plan, "cpu")
    assert second.ran == 1 and second.records[0].klass == "ok"


def test_a_flash_attn_binary_without_kernels_for_the_gpu_is_unsupported_before_training(tmp_path: Path) -> None:
    class Sm80Wheel(FakeBackend):
        def prepare(self, build: Build, log: Path) -> Prepared:
            facts = {"tool": "fake", "flash_attn": {"file": "flash_attn-2.8.3.whl", "sha256": "a" * 64, "gpu_archs": {"sass": [80], "ptx": []}}}
            return Prepared(python="python", seconds=0.1, reused=False, facts=facts)

    backend = Sm80Wheel()
    backend.seen = "B200"
    (rec,) = runner(tmp_path, backend, gpu_count=1).run(cells(env(gpu="B200")), "B200").records
    assert rec.klass == "unsupported_gpu" and "sm100" in rec.outcome.evidence and "sm80" in rec.outcome.evidence
    assert backend.ran == []  # nothing trained
    assert rec.build is not None and rec.build.flash_attn is not None and rec.build.flash_attn["sha256"] == "a" * 64
    backend.seen = "A100"
    (ok,) = runner(tmp_path / "a100", backend, gpu_count=1).run(cells(env(gpu="A100")), "A100").records
    assert ok.klass == "ok"
