"""check on a GPU type's records it has never seen in the cpu run: CUDA builds from torch's local tag, a flash-attn axis,
a uv.lock, a stack that does not pin torch, and the catalog's word on a flash-attn wheel."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from records_factory import make_record

from envmatrix.answers.check import Answer, answer
from envmatrix.outputs.check_report import sarif
from envmatrix.records.record import Record
from envmatrix.stack import read_stack


def records() -> list[Record]:
    """fa2 (H20): garbled on flash-attn 2.7.4.post1, ok on 2.8.3; a control reproduced in each environment."""
    out = []
    for fa, klass in (("2.7.4.post1", "garbled_output"), ("2.8.3", "ok")):
        out.append(
            make_record(klass, scenario="bf16-fa2", gpu="H20", cuda="12.8", torch="2.8.0", transformers="4.57.6", flash_attn=fa, evidence=f"garbled on {fa}")
        )
        out.append(
            make_record("zero_grad", scenario="ctl-zero-grad", expect="zero_grad", gpu="H20", cuda="12.8", torch="2.8.0", transformers="4.57.6", flash_attn=fa)
        )
    return out


def ask(tmp_path: Path, text: str, name: str = "requirements.txt", gpu: str = "H20") -> tuple[Answer, Path]:
    path = tmp_path / name
    path.write_text(text)
    return answer(read_stack(path), records(), gpu, {}, "3.11"), path


def test_a_flash_attn_pin_a_finding_covers(tmp_path: Path) -> None:
    a, path = ask(tmp_path, "torch==2.8.0+cu128\ntransformers==4.57.6\nflash-attn==2.7.4.post1\n")
    [bad] = a.known_bad
    assert bad.axes == ("flash_attn",) and bad.fixed_in == "flash_attn 2.8.3" and bad.where == (f"{path}:3",)
    assert sarif(a, root=tmp_path)["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] == 3


def test_another_cuda_build_is_not_that_environment(tmp_path: Path) -> None:
    a, _ = ask(tmp_path, "torch==2.8.0+cu126\ntransformers==4.57.6\nflash-attn==2.8.3\n")
    assert not a.vetted and a.nearest[0].differs == ("cuda 12.8 (yours: 12.6)",)
    b, _ = ask(tmp_path, "torch==2.8.0+cu128\ntransformers==4.57.6\nflash-attn==2.8.3\n")
    assert [v.env for v in b.vetted if v.vetted] == ["cu128-torch2.8.0-tf4.57.6-fa2.8.3-h20-py3.11"] and b.exit_code() == 0


def test_a_uv_lock_and_a_stack_without_torch(tmp_path: Path) -> None:
    lock = (
        'version = 1\nrequires-python = ">=3.11"\n\n[[package]]\nname = "transformers"\nversion = "4.57.6"\n'
        'source = { registry = "https://pypi.org/simple" }\n\n[[package]]\nname = "flash-attn"\nversion = "2.7.4.post1"\n'
        'source = { registry = "https://pypi.org/simple" }\n'
    )
    a, path = ask(tmp_path, lock, "uv.lock")
    [bad] = a.known_bad
    assert bad.where == (f"{path}:9",)  # the [[package]] table that locks it
    assert any("does not pin torch" in n for n in a.notes)


def test_the_catalog_knows_a_flash_attn_without_a_wheel_for_that_torch(tmp_path: Path) -> None:
    a, _ = ask(tmp_path, "torch==2.8.0+cu128\ntransformers==4.57.6\nflash-attn==2.6.3\n")
    assert any(d.source == "catalog" and d.reason.startswith("flash-attn") and d.where.endswith(":3") for d in a.declared)


def test_a_record_of_another_gpu_never_answers(tmp_path: Path) -> None:
    moved = [dataclasses.replace(r, cell=dataclasses.replace(r.cell, gpu="A100")) for r in records()]
    path = tmp_path / "r.txt"
    path.write_text("torch==2.8.0+cu128\ntransformers==4.57.6\nflash-attn==2.7.4.post1\n")
    a = answer(read_stack(path), moved, "H20", {}, "3.11")
    assert not a.known_bad and not a.vetted and a.records == 0


def test_an_interpreter_on_a_host_whose_driver_is_too_old_for_its_cuda_build(tmp_path: Path) -> None:
    path = tmp_path / "r.txt"
    path.write_text("torch==2.8.0+cu128\ntransformers==4.57.6\nflash-attn==2.8.3\n")
    stack = read_stack(path)
    old = answer(stack, records(), "H20", {}, "3.11", driver="470.82.01")
    assert [d.reason for d in old.declared] == ["torch 2.8.0+cu128 is a CUDA 12.8 build, which needs NVIDIA driver ≥ 525.60.13; this host's is 470.82.01"]
    assert old.exit_code() == 1 and old.declared[0].where.endswith(":1")
    assert not answer(stack, records(), "H20", {}, "3.11", driver="570.86.10").declared
