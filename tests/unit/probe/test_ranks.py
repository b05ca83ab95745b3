"""The launcher of forked ranks (probes/ranks.py) without the probe: each rank's environment, torchrun's
supervision (the first failure stops the others, SIGKILL after the grace), its summary, and how the
classifier reads that summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import scan_text
from probes.ranks import describe, rank_env

ROOT = Path(__file__).resolve().parents[3]


def launch(tmp: Path, body: str, *, world: int = 2, death: float = 30.0, env: dict[str, str] | None = None) -> tuple[int, str, float]:
    """ranks.launch(world, run) in a fresh interpreter, `run` being `body`; (exit status, output, seconds)."""
    header = [
        "import json, os, signal, sys, time",
        f"sys.path.insert(0, {str(ROOT)!r})",
        "from probes import ranks",
        f"ranks.DEATH_TIMEOUT_S = {death}",
        f"OUT = {str(tmp)!r}",
        "",
    ]
    body = textwrap.indent(textwrap.dedent(body).strip(), "    ")
    script = "\n".join([*header, "def run():", body, f"sys.exit(ranks.launch({world}, run, lambda: None))", ""])
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env or {**os.environ, "OMP_NUM_THREADS": "3"})
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start


def test_each_rank_gets_its_own_torchrun_variables(tmp_path: Path) -> None:
    code, out, _ = launch(tmp_path, "json.dump(dict(os.environ), open(f'{OUT}/{os.environ[\"RANK\"]}.json', 'w'))\nreturn 0", world=3)
    assert code == 0, out
    envs = [json.loads((tmp_path / f"{r}.json").read_text()) for r in range(3)]
    for rank, env in enumerate(envs):
        assert (env["RANK"], env["LOCAL_RANK"], env["ROLE_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == (str(rank),) * 3 + ("3", "3")
        assert env["OMP_NUM_THREADS"] == "3"  # the user's setting wins, as under torchrun
    assert len({(e["MASTER_ADDR"], e["MASTER_PORT"], e["TORCHELASTIC_RUN_ID"]) for e in envs}) == 1  # one rendezvous
    assert "3 ranks forked by the environment's helper" in out


def test_one_thread_per_rank_unless_the_user_set_it(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    body = "import torch\nopen(f'{OUT}/{os.environ[\"RANK\"]}', 'w').write(f'{torch.get_num_threads()} {os.environ[\"OMP_NUM_THREADS\"]}')\nreturn 0"
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    code, out, _ = launch(tmp_path, body, env=env)
    assert code == 0, out
    assert [(tmp_path / str(r)).read_text() for r in range(2)] == ["1 1", "1 1"]


def test_the_first_failure_stops_the_other_ranks_and_is_summarised_as_torchrun_does(tmp_path: Path) -> None:
    body = """
    if os.environ["RANK"] == "1":
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGFPE)
    time.sleep(600)
    return 0
    """
    code, out, seconds = launch(tmp_path, body)
    assert code == 1 and seconds < 30, out
    assert "rank      : 1 (local_rank: 1)" in out and "exitcode  : -8 (pid: " in out and "Signal 8 (SIGFPE) received by PID" in out
    assert classify(RunFacts(scan=scan_text(out), exit_code=code)).outcome == "sigfpe"


def test_a_rank_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    body = """
    if os.environ["RANK"] == "0":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(600)
    return 5
    """
    code, out, seconds = launch(tmp_path, body, death=1.0)
    assert code == 1 and seconds < 30, out
    assert "rank      : 1 (local_rank: 1)" in out and "exitcode  : 5 (pid: " in out


def test_an_exception_in_a_rank_is_printed_and_fails_the_cell(tmp_path: Path) -> None:
    code, out, _ = launch(tmp_path, "raise RuntimeError('rank ' + os.environ['RANK'] + ' broke')")
    assert code == 1 and "RuntimeError: rank" in out and "exitcode  : 1" in out


def test_rank_env_and_describe() -> None:
    env = rank_env(1, 2, 29500, "r")
    assert env["MASTER_PORT"] == "29500" and env["GROUP_RANK"] == "0" and env["TORCHELASTIC_USE_AGENT_STORE"] == "False"
    assert describe(0x0100, 7) == ["  exitcode  : 1 (pid: 7)"]  # exited 1
    assert describe(9, 7)[1] == "  traceback : Signal 9 (SIGKILL) received by PID 7"


def test_every_failed_rank_is_listed_the_first_as_root_cause(tmp_path: Path) -> None:
    body = """
    if os.environ["RANK"] == "1":
        time.sleep(600)
    raise RuntimeError("Expected to mark a variable ready only once")
    """
    code, out, _ = launch(tmp_path, body)
    assert code == 1 and "exitcode  : 1 (pid: " in out and "exitcode  : -15 (pid: " in out, out  # rank 1 stopped with SIGTERM
    assert out.index("Root Cause") < out.index("rank      : 0") < out.index("Other failures:") < out.index("rank      : 1")
