"""The fork helper for real: the real probe forked from a helper that imported torch and transformers
once. Faults (SIGFPE, a hang, a SIGKILLed child, a killed helper) each leave their own correct record
and the environment's next cell still runs; a helper that cannot import falls back to a process per
cell; records agree with and without the helper; the docker backend forks in a helper container."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ctrl_c_able, wait_for
from rich.console import Console

import envmatrix.run.forkclient as forkclient
from bench.bench_fork import comparable, differences
from envmatrix.backends import Prepared
from envmatrix.backends.host import HostBackend
from envmatrix.plan.expand import expand
from envmatrix.run.forkclient import Helper
from envmatrix.run.runner import Paths, Runner
from envmatrix.spec.matrix import load

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (nox -s tests installs it)"),
]

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 60.0


def write_matrix(tmp: Path, scenarios: dict[str, dict[str, Any]]) -> Path:
    """A one-environment cpu matrix of the installed torch and transformers (the host backend's)."""
    from importlib.metadata import version

    profile = {
        "cuda": ["none"],
        "torch": [version("torch").split("+")[0]],
        "transformers": [version("transformers")],
        "flash_attn": ["none"],
        "gpu": ["cpu"],
        "python": [f"{sys.version_info.major}.{sys.version_info.minor}"],
        "scenarios": list(scenarios),
    }
    path = tmp / "matrix.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "profiles": {"cpu": profile}, "scenarios": scenarios}, sort_keys=False))
    return path


def run_matrix(tmp: Path, scenarios: dict[str, dict[str, Any]], during: Callable[[Path, HostBackend], None] | None = None) -> dict[str, dict[str, Any]]:
    """Run the matrix in this process on the host backend (helper on), one cell at a time (what happens to the
    helper between cells is what these tests check); `during` runs beside it."""
    backend = HostBackend()
    reports = tmp / "reports"
    runner = Runner(backend, Paths(reports), jobs=1, timeout=TIMEOUT, console=Console(file=io.StringIO()))
    cells = expand(load(write_matrix(tmp, scenarios)), "cpu")
    side = threading.Thread(target=during, args=(reports, backend), daemon=True) if during else None
    if side:
        side.start()
    runner.run(cells)
    if side:
        side.join(timeout=60)
    return {r.cell.scenario: json.loads((reports / "results" / f"{r.id.replace('/', '__')}.json").read_text()) for r in runner_records(reports)}


def runner_records(reports: Path) -> list[Any]:
    from envmatrix.records.record import read_record

    return [read_record(p) for p in sorted((reports / "results").glob("*.json"))]


def probe_pid(reports: Path, scenario: str, *, training: bool, rank: int = 0) -> int:
    """The pid of a cell's probe (its rank `rank`) once it started (and, with `training`, once it finished a step)."""
    name = "result.json" if rank == 0 else f"result.rank{rank}.json"

    def ready() -> bool:
        folder = next(reports.glob(f"runs/*__{scenario}"), None)
        if folder is None or not (folder / name).exists():
            return False
        return not training or bool((folder / "metrics.jsonl").exists() and (folder / "metrics.jsonl").read_text().strip())

    wait_for(ready)
    return int(json.loads(next(reports.glob(f"runs/*__{scenario}/{name}")).read_text())["pid"])


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[Helper]:
    """Every helper started during the test."""
    started: list[Helper] = []
    real = forkclient.start_process_helper

    def counting(python: str, env: dict[str, str] | None) -> Helper:
        started.append(real(python, env))
        return started[-1]

    monkeypatch.setattr(forkclient, "start_process_helper", counting)
    return started


def forked(record: dict[str, Any]) -> bool:
    """The probe paid no imports: it was forked from a helper that had them (a fresh process takes seconds)."""
    return bool(record["result"]["timings"]["import_s"] < 0.5) and forkclient.LOG_NOTE.split(":")[0] not in record["log"]["tail"]


def test_faults_leave_their_own_records_and_the_helper_keeps_serving(tmp_path: Path, starts: list[Helper]) -> None:
    scenarios = {
        "sigfpe": {"fault": "sigfpe", "expect": "sigfpe"},
        "killed": {"steps": 10000},
        "rank-killed": {"steps": 10000, "world_size": 2},
        "hang": {"steps": 10000},
        "after": {"steps": 2},
    }

    def kill_the_child(reports: Path, backend: HostBackend) -> None:
        os.kill(probe_pid(reports, "killed", training=True), signal.SIGKILL)
        os.kill(probe_pid(reports, "rank-killed", training=True, rank=1), signal.SIGKILL)  # one rank of a DDP cell

    recs = run_matrix(tmp_path, scenarios, kill_the_child)
    assert recs["sigfpe"]["outcome"]["class"] == "sigfpe" and recs["sigfpe"]["exit_code"] == -8 and recs["sigfpe"]["control"] == "reproduced"
    assert recs["killed"]["outcome"]["class"] == "crash" and recs["killed"]["signal"] == "SIGKILL" and not recs["killed"]["timed_out"]
    rank_killed = recs["rank-killed"]  # torchrun's way: the other rank stopped, exit 1, the signal in the summary
    assert rank_killed["outcome"]["class"] == "crash" and rank_killed["exit_code"] == 1 and not rank_killed["timed_out"]
    assert "Signal 9 (SIGKILL) received by PID" in rank_killed["log"]["tail"] and rank_killed["launch"] == "2 ranks forked"
    assert recs["hang"]["outcome"]["class"] == "timeout" and recs["hang"]["timed_out"]
    assert f"killed after the {TIMEOUT:g} s timeout" in recs["hang"]["log"]["tail"]
    assert recs["after"]["outcome"]["class"] == "ok"
    assert all(forked(r) for r in recs.values()), {k: r["result"]["timings"] for k, r in recs.items()}
    assert len(starts) == 1  # one helper served all five
    assert not starts[0].alive()  # and it ended with the run


def test_a_killed_helper_is_restarted_and_its_cell_still_recorded(tmp_path: Path, starts: list[Helper]) -> None:
    def kill_the_helper(reports: Path, backend: HostBackend) -> None:
        probe_pid(reports, "first", training=False)
        os.kill(starts[0].pid, signal.SIGKILL)

    recs = run_matrix(tmp_path, {"first": {"steps": 3}, "second": {"steps": 2}}, kill_the_helper)
    assert recs["first"]["outcome"]["class"] == "ok"  # ran again in a process of its own
    assert "fork helper not used for this cell" in recs["first"]["log"]["tail"] and "while serving this cell" in recs["first"]["log"]["tail"]
    assert recs["first"]["log"]["tail"].count("$ ") == 1
    assert recs["second"]["outcome"]["class"] == "ok" and forked(recs["second"])
    assert len(starts) == 2 and starts[1].pid != starts[0].pid


def test_a_helper_that_cannot_import_falls_back_and_the_import_crash_is_recorded(tmp_path: Path) -> None:
    bare = shutil.which("python3", path="/usr/bin")
    if bare is None or subprocess.run([bare, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip("needs an interpreter without torch (/usr/bin/python3)")
    spec = load(write_matrix(tmp_path, {"s": {"steps": 1}}))
    out, log = tmp_path / "out", tmp_path / "cell.log"
    with HostBackend() as backend:
        done = backend.run(Prepared(python=bare, seconds=0.0, reused=True), spec.scenarios["s"], out, log, timeout=TIMEOUT, gpu_ids=[])
    assert done.exit_code == 1
    result = json.loads((out / "result.json").read_text())
    assert result["stage"] == "import" and result["error"]["type"] == "ModuleNotFoundError"
    text = log.read_text()
    assert text.startswith("$ " + bare) and "fork helper not used for this cell: the helper's imports failed: ModuleNotFoundError" in text
    assert done.launch.startswith("process (fork helper not used: the helper's imports failed")


def envmatrix_run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "envmatrix", "run", *args], cwd=ROOT, capture_output=True, text=True, timeout=1800, env=env)


def test_records_agree_with_and_without_the_helper(tmp_path: Path) -> None:
    """A subset of the cpu profile's scenarios (bench/bench_fork.py compares all of them)."""
    spec = yaml.safe_load((ROOT / "matrix.yaml").read_text())
    names = ["fp32-sdpa", "ctl-zero-grad", "ctl-nan", "ctl-grad-lost", "ctl-garbled", "ctl-sigfpe", "ddp2", "ctl-ddp-ready-twice"]
    scenarios = {n: spec["scenarios"][n] for n in names}
    # The last rank dies of SIGFPE; the other is stopped by its launcher, before or after gloo raises on the
    # closed connection (a race under torchrun too): its class and exit status must agree, not its log.
    scenarios["ddp-sigfpe"] = {"world_size": 2, "fault": "sigfpe", "expect": "sigfpe"}
    path = write_matrix(tmp_path, scenarios)
    runs = {}
    for mode in ("fork", "nofork"):
        got = envmatrix_run("--file", str(path), "--backend", "host", "--reports", str(tmp_path / mode), *(["--no-fork"] if mode == "nofork" else []))
        assert got.returncode == 0, got.stdout + got.stderr
        runs[mode] = {p.name: json.loads(p.read_text()) for p in (tmp_path / mode / "results").glob("*.json")}
    assert set(runs["fork"]) == set(runs["nofork"]) and len(runs["fork"]) == len(scenarios)
    for name, rec in runs["fork"].items():
        other = runs["nofork"][name]
        if name.endswith("ddp-sigfpe.json"):
            assert (rec["outcome"]["class"], rec["exit_code"], rec["control"]) == (other["outcome"]["class"], other["exit_code"], other["control"])
            continue
        assert forked(rec) and not forked(other)
        ddp = rec["cell"]["scenario_settings"]["world_size"] > 1  # the record says how the probe was started:
        assert (rec["launch"], other["launch"]) == (("2 ranks forked", "torchrun") if ddp else ("forked", "process"))
        assert differences(comparable(rec, tmp_path / "fork"), comparable(other, tmp_path / "nofork")) == [], name
    outcomes = {rec["cell"]["scenario"]: rec["outcome"]["class"] for rec in runs["fork"].values()}
    assert (outcomes["ddp2"], outcomes["ctl-ddp-ready-twice"], outcomes["ddp-sigfpe"]) == ("ok", "ddp_ready_twice", "sigfpe")


#: What torchrun's agent gives its workers that a forked rank has no use for: where a worker writes its
#: error for the agent, and which signals the agent forwards.
AGENT_ONLY = {"TORCHELASTIC_ERROR_FILE", "TORCHELASTIC_SIGNALS_TO_HANDLE"}
#: Values that differ by design: the rendezvous address, port and run id, and who hosts the store.
PER_RUN = {"MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE"}


def test_forked_ranks_see_what_torchrun_workers_see(tmp_path: Path) -> None:
    """The same script under real torchrun and under the helper's launcher: the same variables (less the
    agent's own), the same values but the rendezvous', one CPU thread each, and stdout unbuffered."""
    script = tmp_path / "dump.py"
    script.write_text(
        "import json, os, sys, torch\n"
        "env = dict(os.environ); env['threads'] = str(torch.get_num_threads())\n"
        "env['unbuffered'] = str(sys.stdout.write_through)\n"
        "json.dump(env, open(os.path.join(sys.argv[1], os.environ['RANK'] + '.json'), 'w'))\n"
    )
    base = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    seen = {}
    for mode in ("torchrun", "forked"):
        out = tmp_path / mode
        out.mkdir()
        if mode == "torchrun":
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script), str(out)]
        else:
            run = f"import runpy, sys; sys.path.insert(0, {str(ROOT)!r}); from probes import ranks; sys.argv = [{str(script)!r}, {str(out)!r}]"
            run += f"; sys.exit(ranks.launch(2, lambda: runpy.run_path({str(script)!r}, run_name='__main__') and 0, lambda: None))"
            cmd = [sys.executable, "-c", run]
        got = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=base)
        assert got.returncode == 0, got.stdout + got.stderr
        seen[mode] = [json.loads((out / f"{rank}.json").read_text()) for rank in range(2)]
    for rank in range(2):
        torchrun, mine = ({k: v for k, v in seen[m][rank].items() if base.get(k) != v} for m in ("torchrun", "forked"))
        assert set(torchrun) - AGENT_ONLY == set(mine), rank
        assert {k: v for k, v in torchrun.items() if k not in AGENT_ONLY | PER_RUN} == {k: v for k, v in mine.items() if k not in PER_RUN}
        assert mine["threads"] == "1" and mine["unbuffered"] == "True"


def test_docker_cells_are_forked_in_a_helper_container(tmp_path: Path, docker_client: Any) -> None:
    """On the real engine: one helper container forks the cells; exit statuses read as a container's own
    (128+N); the timeout still kills from outside; no container outlives the run."""
    scenarios = {"sigfpe": {"fault": "sigfpe", "expect": "sigfpe"}, "hang": {"steps": 10000}, "after": {"steps": 2}, "ddp": {"world_size": 2, "steps": 2}}
    path = write_matrix(tmp_path, scenarios)
    got = envmatrix_run("--file", str(path), "--backend", "docker", "--timeout", f"{TIMEOUT:g}", "--reports", str(tmp_path / "r"))
    assert got.returncode == 0, got.stdout + got.stderr
    recs = {r["cell"]["scenario"]: r for r in (json.loads(p.read_text()) for p in (tmp_path / "r" / "results").glob("*.json"))}
    assert recs["sigfpe"]["outcome"]["class"] == "sigfpe" and recs["sigfpe"]["exit_code"] == 128 + signal.SIGFPE
    assert recs["hang"]["outcome"]["class"] == "timeout" and recs["hang"]["timed_out"] and recs["hang"]["exit_code"] == 128 + signal.SIGKILL
    assert recs["after"]["outcome"]["class"] == "ok"
    assert recs["ddp"]["outcome"]["class"] == "ok" and recs["ddp"]["launch"] == "2 ranks forked in the environment's container"
    assert all(forked(r) for r in recs.values())
    assert all(Path(r["log"]["path"]).read_text().startswith("$ docker run envmatrix-probe:") for r in recs.values())  # the whole log
    assert docker_client.containers.list(all=True, filters={"label": "envmatrix=cell"}) == []


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_helper_and_cell_die_with_the_runner(tmp_path: Path, sig: int) -> None:
    """Ctrl-C stops the helper and its cell; kill -9 of the runner too (parent-death signals), before any reaping."""
    path = write_matrix(tmp_path, {"long": {"steps": 10000}})
    reports = tmp_path / "r"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "envmatrix", "run", "--file", str(path), "--backend", "host", "--reports", str(reports)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, preexec_fn=ctrl_c_able)
    child = probe_pid(reports, "long", training=True)
    helper = int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[1])  # its parent
    assert "forkserver.py" in Path(f"/proc/{helper}/cmdline").read_text()
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == (130 if sig == signal.SIGINT else -signal.SIGKILL)
    wait_for(lambda: not alive(child) and not alive(helper), timeout=20)
