"""The matrix for real: venv backend end to end, and faults that must never cost another cell's record."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ctrl_c_able, wait_for
from conftest import write_host_matrix as write_matrix

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (nox -s tests installs it)"),
]


def envmatrix(*args: str, cwd: Path, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "envmatrix", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def finish(proc: subprocess.Popen[str], timeout: float = 900) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def records(reports: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for p in (reports / "results").glob("*.json"):
        data = json.loads(p.read_text())
        out[data["cell"]["scenario"]] = data
    return out


HEALTHY = {"fp32-sdpa": {"attn": "sdpa"}}
CONTROL = {"ctl-zero-grad": {"temperature": 0.01, "top_p": 0.001, "expect": "zero_grad"}}
LONG = {"long": {"steps": 10000, "description": "runs far longer than any timeout: a stand-in for a hang"}}


def test_venv_backend_end_to_end(tmp_path: Path) -> None:
    """2 transformers releases × 2 scenarios (one a control) in real venvs, then an unchanged re-run."""
    path = write_matrix(tmp_path, {**HEALTHY, **CONTROL}, transformers=["4.51.3", "4.57.6"])
    args = ("run", "--file", str(path), "--profile", "cpu", "--backend", "venv", "--venvs", str(tmp_path / "venvs"), "--reports", str(tmp_path / "r"))
    code, out = finish(envmatrix(*args, cwd=tmp_path))
    assert code == 0, out
    recs = [json.loads(p.read_text()) for p in (tmp_path / "r" / "results").glob("*.json")]
    assert len(recs) == 4
    for rec in recs:
        facts = rec["environment"]["facts"]
        assert facts["transformers"] == rec["cell"]["transformers"]  # read inside the venv
        assert facts["torch"] == "2.13.0+cpu"
        assert any(line.startswith("transformers==") for line in rec["environment"]["build"]["freeze"])
        expected = "zero_grad" if rec["cell"]["scenario"] == "ctl-zero-grad" else "ok"
        assert rec["outcome"]["class"] == expected, rec["outcome"]
    assert "2/2 controls reproduced" in out
    code, out = finish(envmatrix(*args, cwd=tmp_path))
    assert code == 0 and "0 cells run, 4 cached" in out


def test_hanging_cell_is_killed_and_the_matrix_goes_on(tmp_path: Path) -> None:
    path = write_matrix(tmp_path, {**LONG, **HEALTHY})
    code, out = finish(envmatrix("run", "--file", str(path), "--backend", "host", "--timeout", "40", "--reports", str(tmp_path / "r"), cwd=tmp_path))
    assert code == 0, out
    recs = records(tmp_path / "r")
    assert recs["long"]["outcome"]["class"] == "timeout" and recs["long"]["timed_out"]
    assert recs["fp32-sdpa"]["outcome"]["class"] == "ok"


def test_cell_killed_with_sigkill_is_recorded_as_crash(tmp_path: Path) -> None:
    path = write_matrix(tmp_path, {**LONG, **HEALTHY})
    reports = tmp_path / "r"
    proc = envmatrix("run", "--file", str(path), "--backend", "host", "--reports", str(reports), cwd=tmp_path)
    result = next(reports.glob("runs/*__long"), None)

    def training() -> bool:
        nonlocal result
        result = next(reports.glob("runs/*__long"), None)
        if result is None or not (result / "metrics.jsonl").exists():
            return False
        return bool((result / "metrics.jsonl").read_text().strip())

    wait_for(training)
    assert result is not None
    pid = json.loads((result / "result.json").read_text())["pid"]
    os.kill(pid, signal.SIGKILL)
    code, out = finish(proc)
    assert code == 0, out
    recs = records(reports)
    assert recs["long"]["outcome"]["class"] == "crash" and recs["long"]["signal"] == "SIGKILL"
    assert recs["fp32-sdpa"]["outcome"]["class"] == "ok"


def test_interrupted_run_resumes_to_completion(tmp_path: Path) -> None:
    scenarios = {f"s{i}": {"steps": 2 if i == 0 else 100} for i in range(3)}  # forked cells are quick: the later ones train for seconds
    path = write_matrix(tmp_path, scenarios)
    reports = tmp_path / "r"
    args = ("run", "--file", str(path), "--backend", "host", "--reports", str(reports))
    proc = envmatrix(*args, cwd=tmp_path, preexec_fn=ctrl_c_able)
    wait_for(lambda: len(list((reports / "results").glob("*.json"))) >= 1)
    proc.send_signal(signal.SIGINT)
    code, out = finish(proc)
    assert code == 130, out
    assert "re-run the same command" in out
    done_first = len(list((reports / "results").glob("*.json")))
    assert 1 <= done_first < 3
    assert not [p for p in (reports / "results").iterdir() if p.name.endswith(".tmp")]
    code, out = finish(envmatrix(*args, cwd=tmp_path))
    assert code == 0, out
    assert f"{3 - done_first} cells run, {done_first} cached" in out
    assert len(records(reports)) == 3


def test_two_runners_share_one_results_folder(tmp_path: Path) -> None:
    scenarios = {f"s{i}": {"steps": 1} for i in range(4)}
    path = write_matrix(tmp_path, scenarios)
    reports = tmp_path / "r"
    common = ("run", "--file", str(path), "--backend", "host", "--reports", str(reports))
    a = envmatrix(*common, "--only", "*/s{0,1,2}", cwd=tmp_path)
    b = envmatrix(*common, "--only", "*/s{1,2,3}", cwd=tmp_path)
    (ca, oa), (cb, ob) = finish(a), finish(b)
    assert ca == 0 and cb == 0, oa + ob
    recs = records(reports)
    assert set(recs) == {"s0", "s1", "s2", "s3"}
    assert all(r["outcome"]["class"] == "ok" for r in recs.values())


def test_failed_build_is_recorded_for_each_of_its_cells(tmp_path: Path) -> None:
    """A venv that cannot be built (no such transformers release) ends in build_failed records, not a crash."""
    path = write_matrix(tmp_path, {**HEALTHY, **CONTROL}, transformers=["99.0.0"])
    args = ("run", "--file", str(path), "--backend", "venv", "--no-resolve", "--venvs", str(tmp_path / "venvs"), "--reports", str(tmp_path / "r"))
    code, out = finish(envmatrix(*args, cwd=tmp_path))
    assert code == 3, out  # every environment failed to build
    recs = records(tmp_path / "r")
    assert set(recs) == {"fp32-sdpa", "ctl-zero-grad"}
    for rec in recs.values():
        assert rec["status"] == "build_failed" and rec["outcome"]["class"] == "build_failed"
        assert "install torch, transformers, peft" in rec["outcome"]["evidence"] and "failed" in rec["outcome"]["evidence"]
        assert "transformers" in rec["log"]["tail"]


def probe_processes(marker: str) -> list[int]:
    """Live processes whose command line names `marker` (a cell's run folder)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            if marker in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("scenario", [LONG, {"long": {"steps": 10000, "world_size": 2}}], ids=["single", "ddp2"])
def test_runner_killed_with_sigkill_leaves_no_orphaned_probe(tmp_path: Path, scenario: dict[str, dict[str, Any]]) -> None:
    """kill -9 of the runner: its probe dies with it (parent-death signal) or, for torchrun's ranks, the
    next run on the same folder kills the orphaned process group it finds in the cell's owner file."""
    path = write_matrix(tmp_path, {**scenario, **HEALTHY})
    reports = tmp_path / "r"
    proc = envmatrix("run", "--file", str(path), "--backend", "host", "--only", "*/long", "--reports", str(reports), cwd=tmp_path)
    wait_for(lambda: any(reports.glob("runs/*__long/metrics.jsonl")) and bool(next(reports.glob("runs/*__long/metrics.jsonl")).read_text()), timeout=300)
    marker = str(next(reports.glob("runs/*__long")))
    assert probe_processes(marker)
    proc.kill()
    proc.communicate()
    code, out = finish(envmatrix("run", "--file", str(path), "--backend", "host", "--only", "*/fp32-sdpa", "--reports", str(reports), cwd=tmp_path))
    assert code == 0, out
    wait_for(lambda: not probe_processes(marker), timeout=20)


def test_two_runs_of_one_cell_leave_one_valid_record(tmp_path: Path) -> None:
    path = write_matrix(tmp_path, {"s": {"steps": 2}})
    reports = tmp_path / "r"
    args = ("run", "--file", str(path), "--backend", "host", "--reports", str(reports))
    a, b = envmatrix(*args, cwd=tmp_path), envmatrix(*args, cwd=tmp_path)
    (ca, oa), (cb, ob) = finish(a), finish(b)
    assert ca == 0 and cb == 0, oa + ob
    assert sorted([oa.count("1 cells run, 0 cached"), ob.count("0 cells run, 1 cached")]) in ([0, 1], [1, 1])
    from envmatrix.records.record import read_record

    (file,) = (reports / "results").glob("*.json")
    rec = read_record(file)
    assert rec.klass == "ok" and rec.log.tail.count("$ ") == 1  # one run's log, not two interleaved
    assert [m["step"] for m in rec.metrics] == [1, 2]


def test_backend_exception_in_a_real_venv_build_is_recorded(tmp_path: Path) -> None:
    """A venv root that is a file: the backend raises (not a BuildFailed) and every cell still gets a record."""
    path = write_matrix(tmp_path, {**HEALTHY, **CONTROL})
    blocker = tmp_path / "venvs"
    blocker.write_text("not a folder")
    code, out = finish(envmatrix("run", "--file", str(path), "--backend", "venv", "--venvs", str(blocker), "--reports", str(tmp_path / "r"), cwd=tmp_path))
    recs = records(tmp_path / "r")
    assert set(recs) == {"fp32-sdpa", "ctl-zero-grad"}, out
    for rec in recs.values():
        assert rec["status"] == "build_failed" and "raised" in rec["outcome"]["evidence"]
    (build_log,) = (tmp_path / "r" / "logs" / "builds").glob("*.log")
    assert "Traceback" in build_log.read_text()
    assert code == 3, out
