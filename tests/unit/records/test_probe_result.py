"""The typed probe result: real probe output reads without a problem and every field the probe writes
is in the type; the published schema is current; damaged or hostile files never raise."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import random
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from records_factory import make_record

from envmatrix.records import probe_result as pr
from envmatrix.records.probe_result import SCHEMA_PATH, ProbeResult, json_schema, read_probe_result
from envmatrix.records.record import Record
from envmatrix.records.schema import hints, json_key
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.runfacts import gather
from probes.grpo_smoke import build_parser

DATA = Path(__file__).resolve().parents[2] / "data" / "probe-result"
with (DATA / "INDEX.tsv").open() as fh:
    RUNS = list(csv.DictReader(fh, delimiter="\t"))


def load(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / name / "result.json").read_text())
    return data


def unknown_keys(hint: Any, data: Any, where: str = "") -> list[str]:
    """Keys in `data` that no field of the type `hint` (or of the types inside it) reads."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return [m for a in args for m in unknown_keys(a, data, where)]
    if origin is tuple and isinstance(data, list):
        return [m for item in data for m in unknown_keys(args[0], item, where)]
    if origin is Mapping and isinstance(data, dict):
        return [m for k, v in data.items() for m in unknown_keys(args[1], v, f"{where}{k}.")]
    if not (dataclasses.is_dataclass(hint) and isinstance(data, dict)):
        return []
    kinds = hints(hint)  # type: ignore[arg-type]
    by_key = {json_key(f): kinds[f.name] for f in dataclasses.fields(hint) if not f.metadata.get("internal")}
    missing = [f"{where}{k}" for k in data if k not in by_key]
    return missing + [m for k, v in data.items() if k in by_key for m in unknown_keys(by_key[k], v, f"{where}{k}.")]


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r["name"])
def test_real_results_read_whole_and_the_type_knows_every_field(run: dict[str, str]) -> None:
    result = read_probe_result(DATA / run["name"] / "result.json")
    assert result is not None and result.readable and result.problems == ()
    assert unknown_keys(ProbeResult, load(run["name"])) == []
    assert result.probe_version == "1" and result.options.num_generations is not None and result.timings.total_s


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r["name"])
def test_real_results_classify_as_recorded(run: dict[str, str]) -> None:
    folder = DATA / run["name"]
    facts = gather(folder, folder / "probe.log", exit_code=int(run["exit_code"]))
    assert classify(facts).outcome == run["outcome"]
    assert facts.result == load(run["name"])  # echoed as the probe wrote it


def test_sections_are_typed() -> None:
    kernels = read_probe_result(DATA / "broken-attention-kernels" / "result.json")
    assert kernels is not None and kernels.kernels is not None and kernels.parity is not None and kernels.generation is not None
    assert (
        kernels.kernels.checked == 90 and kernels.kernels.failures == () and set(kernels.kernels.worst) == {"gemm/bf16", "sdpa/bf16", "gemm/fp16", "sdpa/fp16"}
    )
    assert kernels.parity.within_tolerance is False and kernels.parity.paths["text"].rel_err == kernels.parity.rel_err
    assert kernels.generation.passed_as == "kwargs" and kernels.generation.saved["top_k"] == 1 and kernels.model is not None
    assert kernels.model.class_name == "Qwen2ForCausalLM"
    nan = read_probe_result(DATA / "one-generation" / "result.json")
    assert nan is not None and nan.error is not None and nan.error.stage == "train" and nan.first_nonfinite_step == 1
    assert len(nan.grad_norm_first_steps) == 1 and nan.grad_norm_first_steps[0] != nan.grad_norm_first_steps[0]  # NaN kept: it is the evidence


def test_options_are_the_probes_options() -> None:
    dests = {a.dest for a in build_parser()._actions if a.dest not in ("help", "out")}
    assert {f.name for f in dataclasses.fields(pr.ProbeOptions)} == dests


def test_env_is_what_the_probe_reads() -> None:
    torch = pytest.importorskip("torch")
    from probes.envfacts import environment_facts

    facts = environment_facts(torch.device("cpu"))
    assert list(facts) == [f.name for f in dataclasses.fields(pr.EnvFacts)]
    assert ProbeResult.parse({"env": facts}).problems == ()


def test_the_trl_section_as_run_trl_writes_it() -> None:
    from probes.trl_trainer import DEFAULTS_SHOWN, grpo_config_kwargs

    options = build_parser().parse_args(["--out", "x", "--trainer", "trl", "--grad-ckpt", "non_reentrant"])
    config = grpo_config_kwargs(options, out_dir=Path("x"), n_prompts=4, world=1, max_new_tokens=16, device="cpu", accepted=None)
    trl = {
        "version": "0.29.0",
        "config": {k: v for k, v in config.items() if k != "output_dir"},
        "not_applied": {"std": "biased"},
        "left_out": ["vllm_mode"],
        "defaults_kept": dict.fromkeys(DEFAULTS_SHOWN, None) | {"loss_type": "dapo", "epsilon": 0.2},
    }
    result = ProbeResult.parse(json.loads(json.dumps({**load("healthy"), "trl": trl})))
    assert result.problems == () and result.trl is not None and result.trl.config["gradient_checkpointing_kwargs"] == {"use_reentrant": False}


def test_published_schema_is_current_and_real_results_match_it() -> None:
    assert json.loads(SCHEMA_PATH.read_text()) == json_schema(), (
        "probe-result.schema.json is stale: python -m envmatrix.records.probe_result > probe-result.schema.json"
    )
    validator = jsonschema.Draft202012Validator(json_schema())
    for run in RUNS:
        assert [e.message for e in validator.iter_errors(load(run["name"]))] == []
    assert list(validator.iter_errors({**load("healthy"), "steps_completed": "four"}))
    assert list(validator.iter_errors({"finished": True}))  # the fields every result has from its first save


# ---- damaged and hostile input -----------------------------------------------------------------------


def test_a_field_of_another_type_is_ignored_and_named() -> None:
    data = load("healthy")
    data["parity"]["rel_err"] = "small"
    data["params"] = ["a"]
    data["samples"] = ["fine", 3]
    data["finished"] = "yes"
    result = ProbeResult.parse(data, "run/result.json")
    assert result.readable and result.parity is not None and result.parity.rel_err is None and result.params is None
    assert result.samples == ("fine",) and result.finished is None and result.steps_completed == 4
    assert result.problems == (
        "run/result.json: finished: expected true or false, found a string; ignored",
        "run/result.json: parity.rel_err: expected a number, found a string; ignored",
        "run/result.json: samples[1]: expected text, found int; ignored",
        "run/result.json: params: expected an object, found a list; ignored",
    )


def test_booleans_are_not_numbers_and_numbers_not_text() -> None:
    result = ProbeResult.parse({"steps_completed": True, "stage": 3, "timings": {"total_s": False}, "first_nonfinite_step": 1.5})
    assert (result.steps_completed, result.stage, result.timings.total_s, result.first_nonfinite_step) == (None, None, None, None)
    assert len(result.problems) == 4


def test_sizes_are_bounded() -> None:
    result = ProbeResult.parse({"samples": ["x" * (pr.MAX_TEXT + 10)] * 2, "grad_norm_first_steps": [0.5] * (pr.MAX_ITEMS + 1)})
    assert len(result.samples[0]) == pr.MAX_TEXT and len(result.grad_norm_first_steps) == pr.MAX_ITEMS
    assert any("cut to" in p for p in result.problems)
    deep: Any = 1
    for _ in range(pr.MAX_DEPTH + 2):
        deep = {"a": deep}
    assert ProbeResult.parse({"trl": {"config": {"x": deep, "y": 1}}}).trl == pr.TrlInfo(config={"y": 1})


@pytest.mark.parametrize("data", [None, [], "result", 3, True])
def test_not_an_object_is_unreadable(data: Any) -> None:
    result = ProbeResult.parse(data)
    assert not result.readable and "expected a JSON object" in str(result.unreadable)
    assert RunFacts(probe=result).result is None


def test_mutated_results_never_raise_and_classify() -> None:
    rng = random.Random(7)
    values: list[Any] = [None, True, 0, -1, 1.5, float("nan"), "x", "", [], [1, "a", None], {}, {"a": [{}]}, "\x00" * 3]
    base = load("broken-attention-kernels")

    def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        out = [prefix] if prefix else []
        if isinstance(node, dict):
            out += [p for k, v in node.items() for p in paths(v, (*prefix, k))]
        elif isinstance(node, list):
            out += [p for i, v in enumerate(node) for p in paths(v, (*prefix, i))]
        return out

    every = paths(base)
    for _ in range(400):
        data = json.loads(json.dumps(base))
        for path in rng.sample(every, 3):
            node = data
            try:
                for key in path[:-1]:
                    node = node[key]
                node[path[-1]] = rng.choice(values)
            except (KeyError, IndexError, TypeError):
                continue
        result = ProbeResult.parse(data)
        classify(RunFacts(probe=result, exit_code=rng.choice([None, 0, 1, -8, -9])))


def test_files_that_are_not_results(tmp_path: Path) -> None:
    assert read_probe_result(tmp_path / "result.json") is None  # the probe never wrote one
    torn = tmp_path / "torn.json"
    torn.write_text('{"finished": tr')
    big = tmp_path / "big.json"
    big.write_bytes(b" " * (pr.MAX_RESULT_BYTES + 1))
    link = tmp_path / "zero.json"
    os.symlink("/dev/zero", link)
    dangling = tmp_path / "dangling.json"
    os.symlink(tmp_path / "nowhere", dangling)
    for path, why in (
        (torn, "not valid JSON"),
        (big, "more than a probe result may hold"),
        (link, "not a regular file"),
        (tmp_path, "not a regular file"),
        (dangling, "cannot be read"),
    ):
        result = read_probe_result(path)
        assert result is not None and not result.readable and why in str(result.unreadable), path
        assert classify(RunFacts(probe=result, exit_code=0)) == classify(RunFacts(exit_code=0))  # no evidence, no crash


# ---- in the record -----------------------------------------------------------------------------------


def test_the_record_embeds_the_result_as_written_and_reads_it_typed() -> None:
    written = {**load("healthy"), "from_a_newer_probe": {"x": 1}}
    record = dataclasses.replace(make_record("ok"), result=written)
    back = Record.from_json(json.loads(json.dumps(record.to_json())))
    assert back.to_json()["result"] == written
    assert back.probe.steps_completed == back.steps_completed == 4 and back.probe.parity is not None
    assert back.parity_rel_err == back.probe.parity.rel_err and back.probe_version == "1"
    assert dataclasses.replace(make_record("ok"), result={"parity": "broken"}).parity_rel_err is None
