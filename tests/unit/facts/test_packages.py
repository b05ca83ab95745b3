"""Extra package axes (trl, peft, ...): validation, ids, requirements, constraints, records, report, lock."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import problems
from records_factory import make_record

from envmatrix.backends.venv import VenvBackend
from envmatrix.facts import pkgconstraints
from envmatrix.host.pipconfig import PipSettings
from envmatrix.outputs import lock
from envmatrix.outputs.report import flat_row
from envmatrix.plan.cells import PLANNED, SKIPPED, Environment
from envmatrix.plan.expand import expand
from envmatrix.plan.install import DEFAULT_PEFT, Sources, package_pins
from envmatrix.records.record import Record, RecordError, cell_info
from envmatrix.spec.matrix import load

Make = Callable[..., Path]


def with_packages(packages: Any, profile: str = "cpu") -> Callable[[dict[str, Any]], None]:
    def edit(d: dict[str, Any]) -> None:
        d["profiles"][profile]["packages"] = packages
        d["scenarios"]["trl-grpo"] = {"trainer": "trl"}

    return edit


# ---- validation ------------------------------------------------------------------------------------


def test_packages_axis_loads_sorted(matrix: Make) -> None:
    spec = load(matrix(with_packages({"trl": ["0.19.1", "1.16.0"], "peft": ["none", "0.15.2"]})))
    assert spec.profiles["cpu"].packages == {"peft": ("none", "0.15.2"), "trl": ("0.19.1", "1.16.0")}
    assert spec.scenarios["trl-grpo"].trainer == "trl"
    assert spec.profiles["gpu"].packages == {}


@pytest.mark.parametrize(
    ("packages", "where", "says"),
    [
        ({"Trl": ["1.16.0"]}, "profiles.cpu.packages.Trl", "write 'trl'"),
        ({"trl;rm": ["1.16.0"]}, "profiles.cpu.packages.trl;rm", "is not a package name"),
        ({"torch": ["2.6.0"]}, "profiles.cpu.packages.torch", "built-in axis"),
        ({"flash-attn": ["2.8.3"]}, "profiles.cpu.packages.flash-attn", "built-in axis"),
        ({"trl": ["1.16.0; rm -rf /"]}, "profiles.cpu.packages.trl[0]", "is not a version"),
        ({"trl": ["1.16.0\n"]}, "profiles.cpu.packages.trl[0]", "is not a version"),
        ({"trl": [">=1.0"]}, "profiles.cpu.packages.trl[0]", "is not a version"),
        ({"trl": ["1.16"] * 2}, "profiles.cpu.packages.trl[1]", "duplicate value"),
        ({"trl": []}, "profiles.cpu.packages.trl", "is empty"),
        ({"trl": None}, "profiles.cpu.packages.trl", "must be a list"),
        (["trl==1.16.0"], "profiles.cpu.packages", "must be a mapping"),
    ],
)
def test_bad_packages_exit_2_naming_the_field(matrix: Make, packages: Any, where: str, says: str) -> None:
    msg = problems(matrix(with_packages(packages)))
    assert f": {where}: " in msg and says in msg, msg


def test_bad_package_error_names_the_line(matrix: Make) -> None:
    path = matrix(with_packages({"trl": ["0.19.1", "1.16.0"]}))
    text = path.read_text().replace("- 1.16.0", "- 1.16.0 && curl x")
    path.write_text(text)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "curl" in ln)
    assert f"{path}:{line}: profiles.cpu.packages.trl[1]" in problems(path)


def test_trainer_and_vllm_fields_are_checked(matrix: Make) -> None:
    msg = problems(matrix(lambda d: d["scenarios"]["fp32-sdpa"].update(trainer="tlr", use_vllm=True)))
    assert "scenarios.fp32-sdpa.trainer: 'tlr' is not one of builtin, trl (did you mean 'trl'?)" in msg
    msg = problems(matrix(lambda d: d["scenarios"]["fp32-sdpa"].update(use_vllm=True)))
    assert "scenarios.fp32-sdpa.use_vllm: vLLM generation is a TRL option" in msg


def test_exclude_and_include_name_packages(matrix: Make) -> None:
    def edit(d: dict[str, Any]) -> None:
        with_packages({"trl": ["none", "1.16.0"]})(d)
        d["profiles"]["cpu"]["scenarios"] = ["fp32-sdpa", "trl-grpo"]
        d["profiles"]["cpu"]["exclude"] = [{"trl": "*.*", "scenario": "fp32-sdpa", "reason": "builtin loop runs without trl"}]
        d["profiles"]["cpu"]["include"] = [{"transformers": "4.57.6", "trl": "0.19.1"}]

    cells = {c.id: c for c in expand(load(matrix(edit)), "cpu")}
    assert "excluded by profiles.cpu.exclude[0]" in cells["cpu-torch2.13.0-tf4.57.6-fanone-trl1.16.0-cpu-py3.11/fp32-sdpa"].reason
    assert cells["cpu-torch2.13.0-tf4.57.6-fanone-trl0.19.1-cpu-py3.11/trl-grpo"].status == PLANNED
    bad = problems(matrix(lambda d: (edit(d), d["profiles"]["cpu"]["exclude"][0].update(tlr="1.*"))))
    assert "profiles.cpu.exclude[0].tlr: unknown key 'tlr' (did you mean 'trl'?)" in bad


# ---- environments and ids ----------------------------------------------------------------------------


def test_ids_without_packages_are_unchanged_and_with_them_readable(matrix: Make) -> None:
    cells = expand(load(matrix(with_packages({"trl": ["none", "1.16.0"], "peft": ["0.15.2"]}))), "cpu")
    envs = sorted({c.env.id for c in cells})
    assert "cpu-torch2.13.0-tf4.57.6-fanone-peft0.15.2-cpu-py3.11" in envs
    assert "cpu-torch2.13.0-tf4.57.6-fanone-peft0.15.2-trl1.16.0-cpu-py3.11" in envs
    plain = Environment("none", "2.13.0", "4.57.6", "none", "cpu", "3.11", (("trl", "none"),))
    assert plain.id == "cpu-torch2.13.0-tf4.57.6-fanone-cpu-py3.11"
    assert plain.build_id == "cpu-torch2.13.0-tf4.57.6-fanone-py3.11"
    digit = Environment("none", "2.13.0", "4.57.6", "none", "cpu", "3.11", (("flash-attn-3", "3.0.0"),))
    assert "-flash-attn-3_3.0.0-" in digit.id


def env(transformers: str = "4.57.6", python: str = "3.11", torch: str = "2.13.0", **packages: str) -> Environment:
    return Environment("none", torch, transformers, "none", "cpu", python, tuple(sorted(packages.items())))


PEFT = f"peft=={DEFAULT_PEFT}"


def test_requirements_pin_the_packages() -> None:
    assert package_pins(env()) == [PEFT]
    assert package_pins(env(trl="1.16.0", accelerate="none")) == [PEFT, "trl==1.16.0"]
    assert package_pins(env(peft="0.15.2")) == ["peft==0.15.2"]
    assert package_pins(env(peft="none")) == []
    backend = VenvBackend(Path("/nonexistent"), use_uv=False, sources=Sources(PipSettings(None, (), ())))
    assert "trl==0.19.1" in backend.requirements(env(trl="0.19.1"))
    assert backend.inputs_key(env(trl="0.19.1")) != backend.inputs_key(env(trl="1.16.0"))


# ---- constraints from wheel metadata -----------------------------------------------------------------


def test_constraint_data_is_dated_and_read_from_wheels() -> None:
    data = json.loads(pkgconstraints.DATA.read_text())
    assert data["refreshed"] and "wheel" in data["source"]
    trl = pkgconstraints.releases()[("trl", "1.16.0")]
    assert trl.wheel == "trl-1.16.0-py3-none-any.whl" and len(trl.sha256) == 64
    assert any(r.startswith("transformers>=") for r in trl.requires)


def test_constraint_rule_skips_with_the_requirement() -> None:
    known = {
        ("trl", "9.0.0"): pkgconstraints.Release(
            "trl", "9.0.0", ("transformers>=4.56.2", "accelerate>=1.4", "packaging>20", 'numpy<2; python_version < "3.10"'), ">=3.11", "trl-9.0.0.whl", "0" * 64
        )
    }
    assert pkgconstraints.environment_reasons(env("4.57.6", trl="9.0.0"), known) == []
    old = pkgconstraints.environment_reasons(env("4.51.3", trl="9.0.0"), known)
    assert old == ["trl 9.0.0 requires transformers>=4.56.2 (from trl-9.0.0.whl's metadata); this environment has transformers 4.51.3"]
    assert "requires Python >=3.11" in pkgconstraints.environment_reasons(env(python="3.10", trl="9.0.0"), known)[0]
    # accelerate at `none` is not pinned: trl's own requirement brings a release that fits, so nothing rules the cell out
    assert pkgconstraints.environment_reasons(env(trl="9.0.0", accelerate="none"), known) == []
    assert pkgconstraints.environment_reasons(env(trl="9.0.0", accelerate="1.2.1"), known) == [
        "trl 9.0.0 requires accelerate>=1.4 (from trl-9.0.0.whl's metadata); this environment has accelerate 1.2.1"
    ]
    assert pkgconstraints.environment_reasons(env(trl="8.0.0"), known) == []  # unknown release: the install decides


def test_plan_skips_impossible_trl_pairs_with_the_reason(matrix: Make) -> None:
    cells = {c.id: c for c in expand(load(matrix(with_packages({"trl": ["none", "0.19.1", "1.16.0"]}))), "cpu")}
    skipped = cells["cpu-torch2.13.0-tf4.51.3-fanone-trl1.16.0-cpu-py3.11/trl-grpo"]
    assert skipped.status == SKIPPED
    assert "trl 1.16.0 requires transformers>=4.56.2 (from trl-1.16.0-py3-none-any.whl's metadata)" in skipped.reason
    assert cells["cpu-torch2.13.0-tf4.51.3-fanone-trl0.19.1-cpu-py3.11/trl-grpo"].status == PLANNED
    no_trl = cells["cpu-torch2.13.0-tf4.57.6-fanone-cpu-py3.11/trl-grpo"]
    assert no_trl.status == SKIPPED and "trainer: trl needs the trl package" in no_trl.reason


def test_vllm_scenario_needs_a_gpu_and_vllm(matrix: Make) -> None:
    def edit(d: dict[str, Any]) -> None:
        with_packages({"trl": ["1.16.0"]}, "gpu")(d)
        d["scenarios"]["trl-vllm"] = {"trainer": "trl", "use_vllm": True}

    cells = expand(load(matrix(edit)), "gpu")
    reasons = {c.reason for c in cells if c.scenario.name == "trl-vllm"}
    assert all("needs the vllm package" in r for r in reasons)


# ---- records, report rows, lock --------------------------------------------------------------------------


def trl_record(outcome: str, scenario: str, expect: str | None = None, freeze: list[str] | None = None) -> Record:
    base = make_record(outcome, scenario=scenario, expect=expect, torch="2.13.0", transformers="4.57.6", gpu="cpu", cuda="none", freeze=freeze)
    environment = env(trl="1.16.0")
    cell = expand_one(environment, scenario, expect)
    return dataclasses.replace(base, cell=cell)


def expand_one(environment: Environment, scenario: str, expect: str | None) -> Any:
    from envmatrix.plan.cells import Cell
    from envmatrix.spec.matrix import Scenario

    return cell_info(Cell(environment, Scenario(name=scenario, trainer="trl", expect=expect)))


def test_record_round_trips_packages_and_old_records_load() -> None:
    rec = trl_record("ok", "trl-grpo")
    assert rec.cell.packages == {"trl": "1.16.0"} and "-trl1.16.0-" in rec.id
    again = Record.from_json(json.loads(json.dumps(rec.to_json())))
    assert again.cell.packages == {"trl": "1.16.0"}
    old = make_record("ok").to_json()
    del old["cell"]["packages"]
    assert Record.from_json(old).cell.packages == {}
    bad = rec.to_json()
    bad["cell"]["packages"] = {"trl": "1.0; rm -rf /"}
    with pytest.raises(RecordError, match=r"cell\.packages\.trl"):
        Record.from_json(bad)


def test_report_row_names_the_packages() -> None:
    row = flat_row(trl_record("ok", "trl-grpo"))
    assert row["packages"] == "trl==1.16.0"
    assert flat_row(make_record("ok"))["packages"] == ""


def test_lock_of_a_trl_environment_pins_trl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    freeze = ["trl==1.16.0", "transformers==4.57.6", "accelerate==1.15.0", "-e file:///src/x"]
    records = [trl_record("ok", "trl-grpo", freeze=freeze), trl_record("zero_grad", "trl-ctl-zero-grad", "zero_grad", freeze=freeze)]

    def fake_report(pins: list[str], build: Any) -> list[dict[str, str]]:  # the registry is the part faked here
        return [{"name": p.split("==")[0], "version": p.split("==")[1], "url": f"https://files.example/{p}.whl", "sha256": "a" * 64} for p in pins]

    monkeypatch.setattr(lock, "pip_report", fake_report)
    folder = lock.write_lock(records, tmp_path, env_id=records[0].env)
    text = (folder / "requirements.lock").read_text()
    assert "trl==1.16.0 \\\n    --hash=sha256:" in text and "-e file" not in text
    assert folder.name == "cpu-torch2.13.0-tf4.57.6-fanone-trl1.16.0-cpu-py3.11"


def test_image_build_args_pin_the_packages(tmp_path: Path) -> None:
    from envmatrix.backends.docker import DockerBackend

    backend = DockerBackend(client=object(), sources=Sources(PipSettings(None, (), ())))
    assert backend.build_args(env(trl="1.16.0"))["PACKAGES"] == f"{PEFT} trl==1.16.0"
    assert backend.build_args(env())["PACKAGES"] == PEFT
    dockerfile = (Path(__file__).resolve().parents[3] / "dockerfiles" / "probe.Dockerfile").read_text()
    assert "ARG PACKAGES=" in dockerfile and "COPY probes/ /opt/envmatrix/probes/" in dockerfile  # the whole probe package, trl_trainer.py included


def test_an_sdist_only_release_is_read_from_its_pkg_info_without_building(tmp_path: Path) -> None:
    """DeepSpeed publishes sdists only: its requirements come from PKG-INFO in the archive; setup.py never runs."""
    import io
    import tarfile

    info = "Metadata-Version: 2.4\nName: deepspeed\nVersion: 9.9.9\nDynamic: requires-dist\nRequires-Dist: torch\nRequires-Dist: pydantic>=2.0.0\n"
    info += 'Requires-Dist: mpi4py; extra == "1bit-mpi"\n'
    sdist = tmp_path / "deepspeed-9.9.9.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        for name, text in (("deepspeed-9.9.9/PKG-INFO", info), ("deepspeed-9.9.9/setup.py", "raise SystemExit('built')\n")):
            data = text.encode()
            member = tarfile.TarInfo(name)
            member.size = len(data)
            tf.addfile(member, io.BytesIO(data))
    assert pkgconstraints.sdist_metadata(sdist) == (["torch", "pydantic>=2.0.0"], None, {})


def test_the_shipped_deepspeed_releases_are_known_from_their_sdists() -> None:
    known = pkgconstraints.releases()
    ds = known[("deepspeed", "0.18.4")]
    assert ds.wheel == "deepspeed-0.18.4.tar.gz" and "torch" in ds.requires and len(ds.sha256) == 64
