"""The probe for real on CPU: every control reproduces its class, the healthy scenarios train."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from envmatrix.classify import classify
from envmatrix.execute import probe_command, run_logged
from envmatrix.runfacts import gather
from envmatrix.spec import load

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
        reason="needs torch and transformers (nox -s tests installs them)",
    ),
]

SPEC = load(Path(__file__).resolve().parents[2] / "matrix.yaml")
CPU = tuple(s for s in SPEC.profiles["cpu"].scenarios if SPEC.scenarios[s].trainer == "builtin")  # trainer trl: test_trl.py


def run(name: str, tmp_path: Path) -> tuple[str, dict, tuple, str]:  # type: ignore[type-arg]
    scenario = SPEC.scenarios[name]
    log = tmp_path / "probe.log"
    done = run_logged(probe_command(sys.executable, scenario, tmp_path), log, timeout=300)
    facts = gather(tmp_path, log, exit_code=done.exit_code, timed_out=done.timed_out)
    return classify(facts).outcome, facts.result or {}, facts.metrics, log.read_text(errors="replace")


@pytest.mark.parametrize("name", [s for s in CPU if SPEC.scenarios[s].expect])
def test_control_reproduces(name: str, tmp_path: Path) -> None:
    outcome, result, _metrics, log = run(name, tmp_path)
    assert outcome == SPEC.scenarios[name].expect, log[-3000:]
    assert result.get("fault", {}).get("note") is None  # the fault was really applied where one is asked for


def test_zero_grad_control_measures_zero(tmp_path: Path) -> None:
    _, result, metrics, _ = run("ctl-zero-grad", tmp_path)
    assert [m["grad_norm"] for m in metrics] == [0.0] * len(metrics) and len(metrics) == 4
    assert all(m["frac_reward_zero_std"] == 1.0 and m["distinct_ratio"] <= 0.25 for m in metrics)
    assert result["params"]["with_grad"] == 0 and result["params"]["changed"] == 0


def test_nan_control_measures_nan(tmp_path: Path) -> None:
    _, result, _metrics, log = run("ctl-nan", tmp_path)
    assert result["first_nonfinite_step"] == 1 and not result["finished"]
    assert "degrees of freedom is <= 0" in log and "probability tensor contains" in log


def test_garbled_control_fails_parity(tmp_path: Path) -> None:
    _, result, _, _ = run("ctl-garbled", tmp_path)
    parity = result["parity"]
    assert parity["within_tolerance"] is False and parity["rel_err"] > 0.3


def test_sigfpe_control_dies_of_signal_8(tmp_path: Path) -> None:
    scenario = SPEC.scenarios["ctl-sigfpe"]
    done = run_logged(probe_command(sys.executable, scenario, tmp_path), tmp_path / "log", timeout=300)
    assert done.exit_code == -8


@pytest.mark.parametrize("name", [s for s in CPU if not SPEC.scenarios[s].expect and s != "frozen-emb-reentrant"])
def test_healthy_scenario_trains(name: str, tmp_path: Path) -> None:
    outcome, result, metrics, log = run(name, tmp_path)
    assert outcome == "ok", log[-3000:]
    assert result["finished"] and result["steps_completed"] == SPEC.scenarios[name].steps
    assert all(m["loss"] == m["loss"] for m in metrics)  # finite
    assert metrics[0]["grad_norm"] > 0
    assert result["params"]["all_got_grad"] and result["params"]["all_changed"]
    assert result["parity"]["within_tolerance"]
    env = result["env"]
    assert env["torch"].startswith("2.") and env["transformers"] and env["python"]


def test_frozen_embeddings_with_reentrant_checkpointing_is_version_dependent(tmp_path: Path) -> None:
    import transformers
    from packaging.version import Version

    outcome, result, _, _ = run("frozen-emb-reentrant", tmp_path)
    assert result["finished"]
    if Version(transformers.__version__) < Version("5"):
        assert outcome == "grad_lost" and not result["params"]["all_got_grad"]
    else:
        assert outcome == "ok"


def test_probe_writes_nothing_to_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    out = tmp_path / "out"
    scenario = SPEC.scenarios["fp32-sdpa"]
    import os

    env = {**os.environ, "HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}
    done = run_logged(probe_command(sys.executable, scenario, out), tmp_path / "log", timeout=300, env=env)
    assert done.exit_code == 0
    assert list(home.iterdir()) == []
