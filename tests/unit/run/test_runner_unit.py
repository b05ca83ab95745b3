"""The runner with a fake backend (tests/simulated.py): caching, GPU slots on single and mixed hosts,
build failures, backend exceptions, Ctrl-C. The real backends have integration tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console
from simulated import MIXED, FakeBackend, MixedHost, smi_lines

from envmatrix.backends import Prepared
from envmatrix.errors import Interrupted
from envmatrix.host.gpus import HostGpus, parse_query
from envmatrix.plan.builds import Build
from envmatrix.plan.cells import Cell, Environment
from envmatrix.records.record import read_record
from envmatrix.run.execute import Completed
from envmatrix.run.runner import Paths, Runner
from envmatrix.spec.matrix import Scenario


def env(transformers: str = "4.57.6", gpu: str = "cpu") -> Environment:
    return Environment(cuda="none", torch="2.13.0", transformers=transformers, flash_attn="none", gpu=gpu, python="3.11")


def cells(*envs: Environment, scenarios: tuple[Scenario, ...] = (Scenario("fp32-sdpa"),)) -> list[Cell]:
    return [Cell(e, s) for e in envs for s in scenarios]


def runner(tmp_path: Path, backend: FakeBackend, **kw: object) -> Runner:
    return Runner(backend, Paths(tmp_path), console=Console(file=open("/dev/null", "w")), **kw)  # type: ignore[arg-type]


def test_runs_records_and_caches(tmp_path: Path) -> None:
    backend = FakeBackend()
    plan = cells(env(), env("5.23.0"), scenarios=(Scenario("a"), Scenario("b")))
    report = runner(tmp_path, backend).run(plan)
    assert report.ran == 4 and report.cached == 0
    assert sorted(backend.prepared) == sorted({c.env.build_id for c in plan})  # each environment once
    assert backend.entered == backend.exited == 1
    assert {r.klass for r in report.records} == {"ok"}
    again = runner(tmp_path, backend).run(plan)
    assert again.ran == 0 and again.cached == 4
    rerun = runner(tmp_path, backend, rerun=True).run(plan)
    assert rerun.ran == 4


def test_build_failure_records_every_cell_of_that_environment(tmp_path: Path) -> None:
    backend = FakeBackend(fail_prepare={"4.51.3"})
    plan = cells(env(), env("4.51.3"), scenarios=(Scenario("a"), Scenario("b"), Scenario("c")))
    report = runner(tmp_path, backend).run(plan)
    failed = [r for r in report.records if r.status == "build_failed"]
    assert len(report.records) == 6 and len(failed) == 3
    assert all(r.klass == "build_failed" and "install transformers failed" in r.outcome.evidence for r in failed)
    assert backend.prepared.count(env("4.51.3").build_id) == 1  # not once per cell
    assert runner(tmp_path, backend).run(plan).ran == 3  # a failed build is not final: tried again


def test_backend_exceptions_become_records_and_the_matrix_goes_on(tmp_path: Path) -> None:
    backend = FakeBackend(raise_prepare={"4.51.3"}, raise_run={"b"})
    plan = cells(env(), env("4.51.3"), scenarios=(Scenario("a"), Scenario("b")))
    report = runner(tmp_path, backend).run(plan)
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
    # the backend's own failure (an engine that would not start a container) is the host's, not the stack's: tried again
    again = runner(tmp_path, FakeBackend()).run(plan)
    assert again.ran == 3 and {(r.cell.transformers, r.cell.scenario): r.klass for r in again.records}[("4.57.6", "b")] == "ok"


def test_gpu_slots_and_world_size(tmp_path: Path) -> None:
    backend = FakeBackend()
    backend.seen = "A100"
    ddp4 = Scenario("ddp4", world_size=4)
    plan = cells(env(gpu="A100"), scenarios=(Scenario("one"), Scenario("ddp2", world_size=2), ddp4))
    report = runner(tmp_path, backend, gpus={"A100": [0, 1]}, jobs=2).run(plan)
    by = {r.cell.scenario: r for r in report.records}
    assert by["ddp4"].klass == "skipped" and "needs 4 A100 GPUs; this runner has 2" in by["ddp4"].outcome.evidence
    gpus = dict(backend.ran)
    assert len(gpus["one"]) == 1 and sorted(gpus["ddp2"]) == [0, 1]


def test_a_probe_on_another_gpu_is_wrong_gpu(tmp_path: Path) -> None:
    backend = FakeBackend()
    backend.seen = "A100"
    (rec,) = runner(tmp_path, backend, gpus={"H20": [0]}).run(cells(env(gpu="H20"))).records
    assert rec.klass == "wrong_gpu" and "A100" in rec.outcome.evidence


def test_other_gpu_types_are_left(tmp_path: Path) -> None:
    report = runner(tmp_path, FakeBackend()).run(cells(env(gpu="cpu"), env(gpu="H20")))
    assert report.other_gpus == 1 and len(report.records) == 1


def test_skipped_cells_are_recorded_by_classify(tmp_path: Path) -> None:
    plan = [Cell(env(), Scenario("x"), status="skipped", reason="no wheel")]
    report = runner(tmp_path, FakeBackend()).run(plan)
    (rec,) = report.records
    assert rec.status == "skipped" and rec.klass == "skipped" and rec.outcome.evidence == "no wheel" and rec.outcome.remedy


def test_a_skipped_record_names_the_eligibility_kinds_that_skipped_it(tmp_path: Path) -> None:
    plan = [Cell(env(), Scenario("x"), status="skipped", reason="needs trl; excluded by rule 3", kinds=("needs", "excluded"))]
    (rec,) = runner(tmp_path, FakeBackend()).run(plan).records
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
        r.run(plan)
    assert backend.stopped >= 1 and backend.exited == 1
    written = list((tmp_path / "results").glob("*.json"))
    assert 0 < len(written) < 6  # some completed and were kept, the rest left for the re-run
    monkeypatch.undo()
    again = runner(tmp_path, backend).run(plan)
    assert again.cached == len(written) and again.ran == 6 - len(written)


def test_timeouts_are_not_cached_as_final(tmp_path: Path) -> None:
    class Hanging(FakeBackend):
        def run(self, ready: Prepared, scenario: Scenario, out: Path, log: Path, *, timeout: float, gpu_ids: list[int]) -> Completed:
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text("step 1\n")
            return Completed(-9, True, timeout)

    plan = cells(env())
    first = runner(tmp_path, Hanging(), timeout=1).run(plan)
    assert first.records[0].klass == "timeout"
    second = runner(tmp_path, FakeBackend(), timeout=600).run(plan)
    assert second.ran == 1 and second.records[0].klass == "ok"


def test_a_flash_attn_binary_without_kernels_for_the_gpu_is_unsupported_before_training(tmp_path: Path) -> None:
    class Sm80Wheel(FakeBackend):
        def prepare(self, build: Build, log: Path) -> Prepared:
            facts = {"tool": "fake", "flash_attn": {"file": "flash_attn-2.8.3.whl", "sha256": "a" * 64, "gpu_archs": {"sass": [80], "ptx": []}}}
            return Prepared(python="python", seconds=0.1, reused=False, facts=facts)

    backend = Sm80Wheel()
    backend.seen = "B200"
    (rec,) = runner(tmp_path, backend, gpus={"B200": [0]}).run(cells(env(gpu="B200"))).records
    assert rec.klass == "unsupported_gpu" and "sm100" in rec.outcome.evidence and "sm80" in rec.outcome.evidence
    assert backend.ran == []  # nothing trained
    assert rec.build is not None and rec.build.flash_attn is not None and rec.build.flash_attn["sha256"] == "a" * 64
    backend.seen = "A100"
    (ok,) = runner(tmp_path / "a100", backend, gpus={"A100": [0]}).run(cells(env(gpu="A100"))).records
    assert ok.klass == "ok"


def test_a_mixed_host_runs_each_cell_on_gpus_of_its_own_type(tmp_path: Path) -> None:
    devices = parse_query(smi_lines(MIXED))
    host = HostGpus(tuple(g.name for g in devices), devices[0].matrix_name, devices)
    assert host.types() == {"A100": [0, 2], "H20": [1, 3]}
    backend = MixedHost(host)
    scenarios = (Scenario("one"), Scenario("two"), Scenario("ddp2", world_size=2), Scenario("ddp4", world_size=4))
    plan = cells(env(gpu="A100"), env(gpu="H20"), env(gpu="cpu"), scenarios=scenarios)
    report = runner(tmp_path, backend, gpus=host.types(), jobs=4).run(plan)
    assert report.other_gpus == 4  # the cpu cells are for another runner
    assert report.types == {"A100": (0, 2), "H20": (1, 3)} and report.types_text == "A100 on 2 GPUs (0,2), H20 on 2 GPUs (1,3)"
    by = {(r.cell.gpu, r.cell.scenario): r for r in report.records}
    for gpu, own in (("A100", {0, 2}), ("H20", {1, 3})):
        assert {by[gpu, s].klass for s in ("one", "two", "ddp2")} == {"ok"}  # the probe saw its own type: no wrong_gpu
        assert all(set(by[gpu, s].gpu_ids) <= own and len(by[gpu, s].gpu_ids) == 1 for s in ("one", "two"))
        assert sorted(by[gpu, "ddp2"].gpu_ids) == sorted(own)
        assert by[gpu, "ddp4"].klass == "skipped" and f"needs 4 {gpu} GPUs; this runner has 2" in by[gpu, "ddp4"].outcome.evidence
        assert by[gpu, "one"].runner.gpu_count == 2
    assert all(backend.device(ids) in ("A100", "H20") for _, ids in backend.ran) and len(backend.ran) == 6


def test_a_cpu_runner_hands_out_no_gpus(tmp_path: Path) -> None:
    backend = FakeBackend()
    report = runner(tmp_path, backend).run(cells(env(), scenarios=(Scenario("one"), Scenario("ddp2", world_size=2))))
    assert report.types == {"cpu": ()} and report.types_text == "cpu (no GPU)"
    assert [ids for _, ids in backend.ran] == [[], []]


class TimedBackend(FakeBackend):
    """Preparing and running take time; every start and end is noted with its monotonic time."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str, float]] = []

    def prepare(self, build: Build, log: Path) -> Prepared:
        import time

        self.events.append(("prepare-start", build.build_id, time.monotonic()))
        time.sleep(0.4)
        ready = super().prepare(build, log)
        self.events.append(("prepare-end", build.build_id, time.monotonic()))
        return ready

    def run(self, ready: Prepared, scenario: Scenario, out: Path, log: Path, *, timeout: float, gpu_ids: list[int]) -> Completed:
        import time

        self.events.append(("run-start", scenario.name + "|" + ready.env.get("OMP_NUM_THREADS", ""), time.monotonic()))
        time.sleep(0.3)
        done = super().run(ready, scenario, out, log, timeout=timeout, gpu_ids=gpu_ids)
        self.events.append(("run-end", scenario.name, time.monotonic()))
        return done


def test_the_next_environment_is_prepared_while_the_cells_of_a_ready_one_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("envmatrix.run.runner.host_cores", lambda: 2)
    backend = TimedBackend()
    plan = cells(env("4.51.3"), env("4.57.6"), env("5.23.0"), scenarios=(Scenario("a"), Scenario("b")))
    report = runner(tmp_path, backend).run(plan)  # --jobs not given: the host's 2 cores
    assert report.ran == 6 and all(r.klass == "ok" for r in report.records)
    times = {(kind, what): t for kind, what, t in backend.events}
    first, second, third = (b.env.build_id for b in (plan[0], plan[2], plan[4]))
    # two environments prepared at once (a large one does not hold back the next); the cells of one start once it is
    # ready, and the third is being prepared while they run
    first_runs = [t for kind, _, t in backend.events if kind == "run-start"]
    # (the two prepared at once take the same time: either may be ready first, and its cells start first)
    ready = min(times[("prepare-end", first)], times[("prepare-end", second)])
    assert times[("prepare-start", second)] < ready <= min(first_runs)
    assert times[("prepare-start", third)] < min(t for kind, _, t in backend.events if kind == "run-end")
    # two cells at once, each with one of the two cores' torch threads
    starts = [what for kind, what, _ in backend.events if kind == "run-start"]
    assert all(s.endswith("|1") for s in starts)
    spans = sorted((t, +1 if kind == "run-start" else -1) for kind, _, t in backend.events if kind in ("run-start", "run-end"))
    running = peak = 0
    for _, step in spans:
        running += step
        peak = max(peak, running)
    assert peak == 2


def test_jobs_follow_what_the_host_carries() -> None:
    from envmatrix.run.runner import default_jobs, thread_env

    assert default_jobs({"cpu": ()}, cores=2) == 2
    assert default_jobs({"A100": (0, 1), "H20": (2, 3, 4)}, cores=64) == 5
    assert thread_env(16, 4) == {"OMP_NUM_THREADS": "4"} and thread_env(2, 8) == {"OMP_NUM_THREADS": "1"}


def test_a_covered_cell_is_recorded_with_the_outcome_of_the_cell_that_ran_and_never_runs(tmp_path: Path) -> None:
    from dataclasses import replace

    from envmatrix.plan.cells import COVERED
    from envmatrix.records.record import Status

    backend = FakeBackend()
    ran, other = cells(env("4.57.6"), env("5.23.0"))
    plan = [ran, replace(other, status=COVERED, reason=f"covered by {ran.id}: fp32-sdpa depends on no package axis", covered_by=ran.id)]
    report = runner(tmp_path, backend).run(plan)
    assert report.ran == 1 and report.covered == 1 and [name for name, _ in backend.ran] == ["fp32-sdpa"]
    record = read_record(tmp_path / "results" / f"{other.id.replace('/', '__')}.json")
    assert record.status == Status.COVERED and record.covered_by == ran.id and record.klass == "ok"
    assert record.outcome.evidence.startswith(f"as {ran.id}, which ran")
    # a re-run with the cell that ran cached still records the covered one
    again = runner(tmp_path, backend).run(plan)
    assert again.cached == 1 and again.covered == 1 and len(backend.ran) == 1


def test_a_host_problem_stops_the_run_instead_of_recording_every_cell(tmp_path: Path) -> None:
    """A full data root or an engine that does not see the runner's folders (host/diskspace.py, host/dockerfs.py) is
    no environment's failure: the run stops with the message (exit status 3) and records nothing for it."""
    from envmatrix.host.diskspace import NoSpace

    class Full(FakeBackend):
        def prepare(self, build: Build, log: Path) -> Prepared:
            raise NoSpace("not enough free space on the Docker engine's data root /var/lib/docker: 1.0 GiB free")

    with pytest.raises(NoSpace, match=r"1\.0 GiB free") as caught:
        runner(tmp_path, Full()).run(cells(env(), env("5.23.0"), scenarios=(Scenario("a"), Scenario("b"))))
    assert caught.value.exit_code == 3
    assert not list((tmp_path / "results").glob("*.json"))  # no cell recorded as a failed build
