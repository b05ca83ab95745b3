"""`envmatrix preflight` for real in the tests' own interpreter: users' architectures (full-size configs and
their tokenizers, no weights) shrunk and trained, a near-greedy GRPO config, and the bad inputs."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from user_models import QWEN3_8B, USER_MODELS, remote_model, user_model, write_model

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (nox -s tests installs it)"),
]
ROOT = Path(__file__).resolve().parents[2]


def preflight(tmp: Path, *args: str) -> tuple[int, str, str]:
    cmd = [sys.executable, "-m", "envmatrix", "preflight", "--file", str(ROOT / "matrix.yaml"), "--profile", "cpu", "--reports", str(tmp / "reports"), *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=tmp)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("name", list(USER_MODELS))
def test_a_users_architecture_trains_tiny_with_its_own_tokenizer(tmp_path: Path, name: str) -> None:
    folder = user_model(tmp_path, name)
    code, out, err = preflight(tmp_path, "--model-config", str(folder), "--format", "json")
    assert code == 0, err[-3000:]
    answer = json.loads(out)
    config = USER_MODELS[name][0]
    assert (answer["class"], answer["exit_code"], answer["model_type"]) == ("ok", 0, config["model_type"])
    built = answer["model"]
    assert built["class"] == config["architectures"][0]  # the user's class, not a stand-in
    assert built["params"] < 2_000_000 and built["layers"] <= 8
    assert "num_hidden_layers" in built["changes"] or "text_config.num_hidden_layers" in built["changes"]
    if USER_MODELS[name][1]["pad"] is None:  # a Llama-style tokenizer: eos pads, as TRL does
        assert built["tokenizer"]["pad_from_eos"] is True


def test_a_near_greedy_grpo_config_gives_zero_grad_with_the_sampling_settings(tmp_path: Path) -> None:
    folder = user_model(tmp_path, "qwen3-8b")
    config = tmp_path / "grpo.yaml"
    config.write_text("learning_rate: 1.0e-6\ntemperature: 0.01\ntop_k: 1\nnum_generations: 4\nloss_type: dr_grpo\nreport_to: wandb\n")
    code, out, err = preflight(tmp_path, "--model-config", str(folder), "--grpo-config", str(config), "--format", "json")
    answer = json.loads(out)
    assert (code, answer["class"]) == (1, "zero_grad"), err[-2000:]
    assert "sampling asked: temperature 0.01, top_p 1.0, top_k 1" in answer["evidence"]
    assert "near-greedy" in answer["remedy"]
    assert answer["grpo_config"]["not_modelled"] == {"loss_type": "dr_grpo", "report_to": "wandb"}
    code, out, err = preflight(tmp_path, "--model-config", str(folder), "--grpo-config", str(config))
    assert code == 1 and "not modelled by the probe (listed, not applied): loss_type=" in " ".join(out.split())


def broken_tokenizer(folder: Path) -> None:
    (folder / "tokenizer.json").write_text("{ this is not a tokenizer")


def unknown_tokenizer(folder: Path) -> None:
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "NoSuchTokenizerFast"}))


def remote(folder: Path) -> None:
    acme = remote_model(folder.parent)
    for name in ("config.json", "configuration_acme.py", "modeling_acme.py"):
        (folder / name).write_text((acme / name).read_text().replace(str(acme / "RAN"), str(folder / "RAN")))


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (lambda f: (f / "config.json").unlink(), "no config.json in the folder"),
        (lambda f: (f / "config.json").write_text("{oops"), "config.json: not valid JSON"),
        (lambda f: (f / "config.json").write_text(json.dumps({**QWEN3_8B, "model_type": "no_such_arch"})), "model_type 'no_such_arch'"),
        (broken_tokenizer, "tokenizer.json: not valid JSON"),
        (unknown_tokenizer, "cannot load: Tokenizer class NoSuchTokenizerFast does not exist"),
        (remote, "asks for remote code"),
    ],
    ids=["no-config", "not-json", "unknown-type", "tokenizer-json", "tokenizer-class", "remote-code"],
)
def test_bad_inputs_exit_2_with_one_clear_line(tmp_path: Path, damage: Any, said: str) -> None:
    folder = user_model(tmp_path, "qwen3-8b")
    damage(folder)
    code, _, err = preflight(tmp_path, "--model-config", str(folder))
    text = " ".join(err.split())
    assert code == 2, text[-2000:]
    assert said in text and "Traceback" not in err
    assert not (folder / "RAN").exists()  # remote code never runs without --trust-remote-code


def test_remote_code_runs_only_when_trusted(tmp_path: Path) -> None:
    folder = remote_model(tmp_path)
    code, _, err = preflight(tmp_path, "--model-config", str(folder))
    assert code == 2 and "pass --trust-remote-code" in " ".join(err.split()) and not (folder / "RAN").exists()
    code, out, err = preflight(tmp_path, "--model-config", str(folder), "--trust-remote-code", "--format", "json")
    answer = json.loads(out)
    assert (code, answer["class"], answer["model"]["class"]) == (0, "ok", "AcmeForCausalLM"), err[-2000:]
    assert (folder / "RAN").exists()


def test_a_missing_folder_is_bad_input(tmp_path: Path) -> None:
    code, _, err = preflight(tmp_path, "--model-config", str(tmp_path / "nowhere"))
    assert code == 2 and "not a folder" in err


def test_written_models_round_trip(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "m", QWEN3_8B, USER_MODELS["qwen3-8b"][1])
    assert json.loads((folder / "config.json").read_text())["num_hidden_layers"] == 36
    assert (folder / "tokenizer.json").is_file()
