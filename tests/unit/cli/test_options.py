"""One CLI convention: the options several commands share are declared once (cli/options.py) and mean,
check and read the same on every command; machine-readable output is `--format json` everywhere."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from records_factory import make_record

from envmatrix.cli import build_parser, main, options
from envmatrix.plan.cells import Environment
from envmatrix.records.record import cell_stem, write_record

#: The least each command needs to parse (its required arguments), before the option under test.
REQUIRED: dict[str, list[str]] = {
    "submit": ["slurm"],
    "bisect": ["--axis", "torch", "--good", "2.5.1", "--bad", "2.6.0", "--scenario", "fp32-sdpa"],
    "classify": ["-"],
}


def commands() -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser by name."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def with_flag(flag: str) -> list[str]:
    return sorted(name for name, p in commands().items() if flag in p._option_string_actions)


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Parse argv; it must be a usage error (exit status 2): its message."""
    with pytest.raises(SystemExit) as ended:
        build_parser().parse_args(argv)
    assert ended.value.code == 2
    return capsys.readouterr().err


# ---- the shared options are the shared objects -------------------------------------------------------


def test_every_copy_of_a_shared_flag_is_the_shared_option() -> None:
    """Wherever a command has a shared flag, its help starts with the one description and it parses
    with the one type and choices: no command declares its own --timeout, --jobs, --format…"""
    seen = 0
    for name, parser in commands().items():
        for option in options.SHARED:
            action = parser._option_string_actions.get(option.flags[0])
            if action is None:
                continue
            seen += 1
            assert action.help is not None and action.help.startswith(option.help), (name, option.flags)
            assert action.type is option.settings.get("type"), (name, option.flags)
            shared = option.settings.get("choices")
            assert action.choices == shared or (shared and tuple(action.choices)[: len(shared)] == shared), (name, option.flags)  # check adds sarif after
            assert action.dest == option.settings.get("dest", option.flags[0].lstrip("-").replace("-", "_")), (name, option.flags)
    assert seen >= 40


def test_timeout_help_is_identical_across_commands() -> None:
    helps = {name: p._option_string_actions["--timeout"].help for name, p in commands().items() if "--timeout" in p._option_string_actions}
    assert set(helps) == {"run", "submit", "probe", "bisect", "doctor", "preflight", "watch"}
    assert len(set(helps.values())) == 1, helps


def test_format_where_output_is_machine_readable() -> None:
    assert with_flag("--format") == ["catalog", "check", "classify", "doctor", "images", "plan", "preflight", "probe", "watch"]
    assert with_flag("--json") == ["classify", "probe"]


# ---- checks ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "submit", "probe", "bisect", "doctor", "watch"])
@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_timeout_must_be_positive_and_finite(command: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error([command, *REQUIRED.get(command, []), f"--timeout={value}"], capsys)
    assert "argument --timeout" in err and "seconds" in err


@pytest.mark.parametrize("command", ["run", "submit"])
@pytest.mark.parametrize("value", ["0", "-1", "257"])
def test_jobs_at_least_one(command: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert "argument --jobs" in usage_error([command, *REQUIRED.get(command, []), f"--jobs={value}"], capsys)


@pytest.mark.parametrize("command", ["plan", "catalog", "classify", "probe", "doctor"])
def test_format_values(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    parse = build_parser().parse_args
    base = [command, *REQUIRED.get(command, [])]
    assert parse(base).format == "text"
    assert parse([*base, "--format", "json"]).format == "json"
    assert parse([*base, "--format", "table"]).format == "text"  # the old name plan and catalog had
    assert "invalid choice" in usage_error([*base, "--format", "xml"], capsys)


@pytest.mark.parametrize("command", ["classify", "probe"])
def test_json_is_an_alias_of_format_json(command: str) -> None:
    args = build_parser().parse_args([command, *REQUIRED.get(command, []), "--json"])
    assert args.format == "json" and not hasattr(args, "json")


# ---- JSON outputs ------------------------------------------------------------------------------------


def test_plan_json_is_one_object_with_environments(matrix: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--file", str(matrix()), "--profile", "gpu", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"cells", "environments", "resolutions", "unreachable", "vetting"}
    assert doc["resolutions"] is None and doc["unreachable"] == {}
    assert all({"environments", "vettable", "controls", "unvettable"} <= set(row) for row in doc["vetting"].values())
    planned = [c for c in doc["cells"] if c["status"] == "planned"]
    assert planned and {c["id"] for c in doc["cells"]} >= {c["id"] for c in planned}
    envs = doc["environments"]
    assert sum(e["cells"] for e in envs) == len(planned)
    assert {e["build"] for e in envs} == {c["build"] for c in planned}
    first = envs[0]
    assert set(first) == {"build", "env", "gpus", "cells", "install", "base_image", "leads"}
    for e in envs:  # every environment with its install set and a base image (a toolkit only where something is compiled)
        assert e["base_image"] and "devel" not in e["base_image"] and e["install"]["base_image"] == e["base_image"]
        assert any(r.startswith(f"transformers=={e['env']['transformers']}") for r in e["install"]["requirements"])
    assert "gpu" not in first["env"] and {"cuda", "torch", "transformers", "flash_attn", "python", "packages"} <= set(first["env"])
    assert set(first["gpus"]) <= {"A100", "H20"}
    assert main(["plan", "--file", str(matrix()), "--profile", "gpu", "--format", "table"]) == 0
    assert "environments to build" in capsys.readouterr().out


def test_catalog_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog", "--format", "json"]) == 0
    assert "torch" in json.loads(capsys.readouterr().out)


def test_classify_json_and_its_alias(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "train.log"
    log.write_text("{'loss': 0.0, 'grad_norm': 0.0, 'reward_std': 0.0, 'frac_reward_zero_std': 1.0}\n" * 2)
    outputs = []
    for flag in (["--format", "json"], ["--json"]):
        assert main(["classify", str(log), *flag]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    data = json.loads(outputs[0])
    assert data["class"] == "zero_grad" and {"evidence", "remedy"} <= set(data)


def test_doctor_json(matrix: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The doctor's verdict for programs: the probe runs are faked (the integration tests run them);
    what is tested is the object the command prints from the diagnosis and the records given."""
    from envmatrix.answers import doctor as answers
    from envmatrix.cli import doctor as command
    from envmatrix.host.gpus import HostGpus

    env = Environment(cuda="none", torch="2.13.0", transformers="4.51.3", flash_attn="none", gpu="cpu", python="3.11")
    ran = [
        make_record("ok", torch="2.13.0", cuda="none", gpu="cpu"),
        make_record("nan_loss", scenario="bf16-sdpa", torch="2.13.0", cuda="none", gpu="cpu", evidence="line 3: loss nan"),
        make_record("zero_grad", scenario="ctl-zero-grad", expect="zero_grad", torch="2.13.0", cuda="none", gpu="cpu"),
    ]
    vetted = tmp_path / "vetted"
    rec = make_record("ok", torch="2.13.0", transformers="4.57.6", cuda="none", gpu="cpu")
    ctl = make_record("zero_grad", scenario="ctl-zero-grad", expect="zero_grad", torch="2.13.0", transformers="4.57.6", cuda="none", gpu="cpu")
    for one in (rec, ctl):  # vetted: a healthy scenario ok and a control reproduced
        write_record(vetted / f"{cell_stem(one.id)}.json", one)

    def diagnose(cells: Any, gpus: Any, reports: Any, *, timeout: float, console: Any) -> answers.Diagnosis:
        console.print("progress goes to the console")
        return answers.Diagnosis(env, ran)

    monkeypatch.setattr(command, "detect_gpus", lambda: HostGpus((), "cpu"))
    monkeypatch.setattr(answers, "installed_environment", lambda gpus, packages=(): env)
    monkeypatch.setattr(answers, "diagnose", diagnose)
    code = main(["doctor", "--file", str(matrix()), "--profile", "cpu", "--results", str(vetted), "--format", "json"])
    out, err = capsys.readouterr()
    assert code == 1
    assert "progress goes to the console" in err  # stdout is the JSON alone
    doc = json.loads(out)
    assert doc["environment"]["id"] == env.id and doc["environment"]["torch"] == "2.13.0"
    assert [s["scenario"] for s in doc["scenarios"]] == ["fp32-sdpa", "bf16-sdpa", "ctl-zero-grad"]
    bad = doc["scenarios"][1]
    assert bad["class"] == "nan_loss" and bad["evidence"] == "line 3: loss nan" and bad["remedy"] and bad["id"].endswith("/bf16-sdpa")
    assert doc["scenarios"][2]["control"] == "reproduced"
    assert doc["verdict"] == "not healthy" and doc["not_ok"] == ["bf16-sdpa"] and doc["exit_code"] == 1
    nearest = doc["nearest_vetted"]
    assert nearest["env"] == rec.env and not nearest["gpu_differs"]
    assert {"axis": "transformers", "installed": "4.51.3", "vetted": "4.57.6"} in nearest["axes"]
