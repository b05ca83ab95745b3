"""Validation: every error kind names the file, the field path and (where known) the line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import problems

from envmatrix.errors import InputError
from envmatrix.spec.matrix import load

Make = Callable[..., Path]


def test_valid_matrix_loads(matrix: Make) -> None:
    spec = load(matrix())
    assert set(spec.profiles) == {"gpu", "cpu"}
    assert spec.profiles["gpu"].axes["torch"] == ("2.5.1", "2.6.0")
    assert spec.scenarios["ctl-zero-grad"].temperature == 0.01
    assert spec.scenarios["ctl-zero-grad"].expect == "zero_grad"
    assert spec.profiles["cpu"].scenarios == ("fp32-sdpa", "bf16-fa2", "ctl-zero-grad")


def test_project_matrix_is_valid() -> None:
    spec = load(Path(__file__).resolve().parents[3] / "matrix.yaml")
    assert {"gpu", "cpu"} <= set(spec.profiles)
    assert any(s.expect for s in spec.scenarios.values())


def test_misspelt_key_suggests(matrix: Make) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["profiles"]["gpu"]["trasnformers"] = d["profiles"]["gpu"].pop("transformers")

    msg = problems(matrix(edit))
    assert "profiles.gpu.trasnformers: unknown key 'trasnformers' (did you mean 'transformers'?)" in msg
    assert "missing required key 'transformers'" in msg


def test_misspelt_scenario_field(matrix: Make) -> None:
    msg = problems(matrix(lambda d: d["scenarios"]["fp32-sdpa"].update(temprature=1.0)))
    assert "scenarios.fp32-sdpa.temprature: unknown key 'temprature' (did you mean 'temperature'?)" in msg


def test_error_names_line(matrix: Make) -> None:
    text = matrix().read_text().replace("- 2.6.0", "- 2.6.0; rm -rf /")
    path = matrix(text=text)
    msg = problems(path)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "rm -rf" in ln)
    assert f"{path}:{line}: profiles.gpu.torch[1]" in msg


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("2.5.1; rm -rf /", "it contains ' ', '/', ';'"),
        ("$(reboot)", "it contains '$', '(', ')'"),
        ("2.5.1`id`", "'`'"),
        ("2.5.1\nRUN curl x", "characters never passed to a shell or a Dockerfile"),
        ("latest", "is not a PEP 440 version"),
        ("v2.5.1", "is not in canonical PEP 440 form"),
    ],
)
def test_malformed_versions_rejected(matrix: Make, value: str, fragment: str) -> None:
    msg = problems(matrix(lambda d: d["profiles"]["gpu"]["torch"].__setitem__(1, value)))
    assert "profiles.gpu.torch[1]" in msg
    assert fragment in msg


def test_cuda_and_python_patterns(matrix: Make) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["profiles"]["gpu"]["cuda"] = ["12", "12.4 && id"]
        d["profiles"]["gpu"]["python"] = ["python3"]

    msg = problems(matrix(edit))
    assert "profiles.gpu.cuda[0]: '12' is not a CUDA version" in msg
    assert "profiles.gpu.cuda[1]: '12.4 && id' is not a CUDA version" in msg
    assert "profiles.gpu.python[0]: 'python3' is not a Python version" in msg


def test_dotted_versions_stay_strings(matrix: Make) -> None:
    text = matrix().read_text().replace("- '12.4'", "- 12.10").replace("- '3.11'", "- 3.10")
    spec = load(matrix(text=text))
    assert spec.profiles["gpu"].axes["cuda"] == ("12.10",)
    assert spec.profiles["gpu"].axes["python"] == ("3.10",)


def test_empty_axis(matrix: Make) -> None:
    msg = problems(matrix(lambda d: d["profiles"]["gpu"].__setitem__("flash_attn", [])))
    assert "profiles.gpu.flash_attn: is empty" in msg


def test_duplicate_value(matrix: Make) -> None:
    msg = problems(matrix(lambda d: d["profiles"]["gpu"]["torch"].append("2.5.1")))
    assert "profiles.gpu.torch[2]: duplicate value '2.5.1' (already at index 0)" in msg


def test_duplicate_yaml_key(matrix: Make) -> None:
    text = matrix().read_text().replace("  cpu:\n", "  gpu:\n", 1)
    msg = problems(matrix(text=text))
    assert "duplicate key 'gpu'" in msg


def test_unknown_gpu(matrix: Make) -> None:
    msg = problems(matrix(lambda d: d["profiles"]["gpu"]["gpu"].append("a100x")))
    assert "profiles.gpu.gpu[2]: unknown GPU 'a100x' (did you mean 'A100'?)" in msg


def test_wrong_types(matrix: Make) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["scenarios"]["fp32-sdpa"].update(steps="four", lora="yes", temperature="hot", world_size=0)
        d["profiles"]["cpu"]["torch"] = {"a": 1}

    msg = problems(matrix(edit))
    assert "scenarios.fp32-sdpa.steps: must be an integer, got 'four'" in msg
    assert "scenarios.fp32-sdpa.lora: must be true or false, got str 'yes'" in msg
    assert "scenarios.fp32-sdpa.temperature: must be a number, got 'hot'" in msg
    assert "scenarios.fp32-sdpa.world_size: 0 is out of range [1, 64]" in msg
    assert "profiles.cpu.torch: must be a list of values, got a mapping" in msg


def test_bad_choice_and_expect(matrix: Make) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["scenarios"]["fp32-sdpa"].update(attn="flash_attention2", expect="nan")

    msg = problems(matrix(edit))
    assert "'flash_attention2' is not one of" in msg and "(did you mean 'flash_attention_2'?)" in msg
    assert "scenarios.fp32-sdpa.expect: 'nan' is not one of" in msg


def test_scenario_referring_to_nothing(matrix: Make) -> None:
    msg = problems(matrix(lambda d: d["profiles"]["cpu"].__setitem__("scenarios", ["fp32-sdpa", "fp32-sdpaa"])))
    assert "profiles.cpu.scenarios[1]: scenario 'fp32-sdpaa' is not defined under scenarios: (did you mean 'fp32-sdpa'?)" in msg


def test_rule_scenario_referring_to_nothing(matrix: Make) -> None:
    msg = problems(matrix(lambda d: d["profiles"]["gpu"].__setitem__("exclude", [{"scenario": "nope-*"}])))
    assert "profiles.gpu.exclude[0].scenario: 'nope-*' matches no scenario" in msg


def test_rule_and_pattern_metacharacters(matrix: Make) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["profiles"]["gpu"]["exclude"] = [{"torch": "2.5.*; id"}]
        d["profiles"]["gpu"]["select"] = ["*|sh"]

    msg = problems(matrix(edit))
    assert "profiles.gpu.exclude[0].torch: '2.5.*; id' is not a pattern" in msg
    assert "profiles.gpu.select[0]: '*|sh' is not a pattern" in msg


def test_include_needs_every_axis(matrix: Make) -> None:
    msg = problems(matrix(lambda d: d["profiles"]["gpu"].__setitem__("include", [{"cuda": "12.8"}])))
    assert "profiles.gpu.include[0]: missing 'torch' (the profile has several values for it; name one)" in msg


def test_yaml_syntax_error(matrix: Make) -> None:
    msg = problems(matrix(text="profiles: [unclosed\n"))
    assert "YAML syntax error" in msg


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such matrix file"):
        load(tmp_path / "absent.yaml")


def test_every_problem_reported_at_once(matrix: Make) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["profiles"]["gpu"]["torch"] = []
        d["profiles"]["cpu"]["gpu"] = ["TPU"]
        d["scenarios"]["fp32-sdpa"]["dtype"] = "fp8"

    msg = problems(matrix(edit))
    assert msg.count("\n") >= 2


def test_base_images_and_wheelhouse(matrix: Make) -> None:
    digest = "nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04@sha256:" + "a" * 64

    def good(d: dict[str, Any]) -> None:
        d["profiles"]["gpu"].update(base_images={"12.4": digest}, wheelhouse="wheels/cu124")

    prof = load(matrix(good)).profiles["gpu"]
    assert prof.base_images == {"12.4": digest} and prof.wheelhouse == "wheels/cu124"

    def bad(d: dict[str, Any]) -> None:
        d["profiles"]["gpu"].update(base_images={"12.4": "ubuntu; rm -rf /", "twelve": "x"}, wheelhouse="$(id)")

    msg = problems(matrix(bad))
    assert "profiles.gpu.base_images.12.4: 'ubuntu; rm -rf /' is not an image reference" in msg
    assert "profiles.gpu.base_images.twelve: 'twelve' is not a CUDA version" in msg
    assert "profiles.gpu.wheelhouse: '$(id)' is not a plain folder path" in msg


@pytest.mark.parametrize(
    ("field", "value"),
    [("torch", "2.5.1\n"), ("cuda", "12.4\n"), ("python", "3.11\n"), ("wheelhouse", "wheels\n"), ("base_images", {"12.4": "nvidia/cuda:12.4.1\n"})],
)
def test_trailing_newline_is_rejected(matrix: Make, field: str, value: Any) -> None:
    """The patterns are full-matched: `$` alone would accept a value ending in a newline."""

    def edit(d: dict[str, Any]) -> None:
        d["profiles"]["gpu"][field] = [value] if field in ("torch", "cuda", "python") else value

    assert f"profiles.gpu.{field}" in problems(matrix(edit))


def test_scenario_name_with_newline_is_rejected(matrix: Make) -> None:
    assert "scenario name 'x\n' must be" in problems(matrix(lambda d: d["scenarios"].update({"x\n": {}})))


@pytest.mark.parametrize(("field", "value"), [("include", 5), ("exclude", True), ("include", "text"), ("exclude", {"a": 1})])
def test_include_exclude_must_be_lists(matrix: Make, field: str, value: Any) -> None:
    assert f"profiles.gpu.{field}: must be a list of entries" in problems(matrix(lambda d: d["profiles"]["gpu"].update({field: value})))


def test_cell_count_is_bounded(matrix: Make) -> None:
    def edit(d: dict[str, Any]) -> None:
        d["profiles"]["gpu"]["torch"] = [f"2.{i}.0" for i in range(300)]
        d["profiles"]["gpu"]["transformers"] = [f"4.{i}.0" for i in range(100)]

    assert "cells (axes × scenarios), more than 50,000" in problems(matrix(edit))


def test_parallel_is_checked_and_needs_ranks(matrix: Make) -> None:
    msg = problems(matrix(lambda d: d["scenarios"]["fp32-sdpa"].update(parallel="zero4", world_size=2)))
    assert "scenarios.fp32-sdpa.parallel: 'zero4' is not one of ddp, zero2, zero3, fsdp2 (did you mean 'zero3'?)" in msg
    msg = problems(matrix(lambda d: d["scenarios"]["fp32-sdpa"].update(parallel="fsdp2")))
    assert "scenarios.fp32-sdpa.parallel: parallel: fsdp2 shards across ranks: set world_size: 2 or more" in msg
    trl = load(matrix(lambda d: d["scenarios"]["fp32-sdpa"].update(parallel="zero3", world_size=2, trainer="trl")))  # through accelerate's plugin
    assert trl.scenarios["fp32-sdpa"].parallel == "zero3" and trl.scenarios["fp32-sdpa"].trainer == "trl"


def test_parallel_on_two_ranks_loads_and_reaches_the_probe(matrix: Make) -> None:
    spec = load(matrix(lambda d: d["scenarios"]["fp32-sdpa"].update(parallel="zero2", world_size=2)))
    scenario = spec.scenarios["fp32-sdpa"]
    assert scenario.parallel == "zero2" and scenario.probe_args()[scenario.probe_args().index("--parallel") + 1] == "zero2"
    assert spec.scenarios["bf16-fa2"].parallel == "ddp"  # the default
