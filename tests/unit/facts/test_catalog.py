"""Catalog rules from FACTS.md: each rule fires where it should and only there."""

from __future__ import annotations

import re
from typing import Any

import pytest

from envmatrix.facts import catalog


def env(**kw: Any) -> list[str]:
    base = {"cuda": "12.4", "torch": "2.6.0", "transformers": "4.51.3", "flash_attn": "none", "gpu": "A100", "python": "3.11", "build_from_source": False}
    base.update(kw)
    return catalog.environment_reasons(**base)


def test_healthy_environment_has_no_reason() -> None:
    assert env() == []
    assert env(cuda="none", gpu="cpu", torch="2.13.0", transformers="5.23.0") == []


def test_torch_cuda_builds() -> None:
    assert any("no cu124" in r for r in env(torch="2.7.1"))
    assert env(torch="2.7.1", cuda="12.8") == []
    assert any("no cu128" in r for r in env(torch="2.5.1", cuda="12.8"))


def test_torch_python_range() -> None:
    assert any("Python 3.9–3.12, not 3.13" in r for r in env(torch="2.5.1", python="3.13"))


def test_unknown_torch() -> None:
    assert any("not in envmatrix's catalog" in r for r in env(torch="3.0.0"))


def test_transformers_torch_floor() -> None:
    assert catalog.torch_floor("4.57.6") == "2.2"
    assert catalog.torch_floor("5.23.0") == "2.4"
    assert catalog.torch_floor("4.30.0") is None
    assert any("requires torch ≥ 2.4" in r for r in env(torch="2.3.1", cuda="12.1", transformers="5.2.0"))


def test_cpu_cuda_mismatch() -> None:
    assert any("cuda: none" in r for r in env(cuda="none"))
    assert any("needs a GPU" in r for r in env(gpu="cpu"))


def test_flash_attn_wheels() -> None:
    assert env(flash_attn="2.7.4.post1", torch="2.6.0") == []
    assert any("publishes no wheel for torch 2.8" in r for r in env(flash_attn="2.7.4.post1", torch="2.8.0", cuda="12.8"))
    assert env(flash_attn="2.8.3", torch="2.8.0", cuda="12.8") == []
    reasons = env(flash_attn="2.8.3", torch="2.5.0")
    assert any("built against torch 2.5.1, not 2.5.0" in r and "#931" in r for r in reasons)


def test_flash_attn_build_from_source_allows() -> None:
    assert env(flash_attn="2.7.4.post1", torch="2.8.0", cuda="12.8", build_from_source=True) == []


def test_flash_attn_needs_ampere() -> None:
    assert any("needs sm80+" in r and "sm70" in r for r in env(flash_attn="2.7.4.post1", gpu="V100"))
    assert any("no CUDA" in r or "cpu runner" in r for r in env(flash_attn="2.7.4.post1", gpu="cpu", cuda="none"))


def test_flash_attn_unknown_release() -> None:
    assert any("knows no prebuilt wheels of flash-attn 9.9.9" in r for r in env(flash_attn="9.9.9"))


def test_hopper_needs_cuda_11_8() -> None:
    assert any("H20 (sm90) needs CUDA ≥ 11.8" in r for r in env(gpu="H20", cuda="11.7", torch="2.6.0"))


def test_scenario_reasons() -> None:
    assert catalog.scenario_reasons(attn="sdpa", dtype="bf16", flash_attn="none", gpu="A100") == []
    assert any("bf16 needs sm80+" in r for r in catalog.scenario_reasons(attn="sdpa", dtype="bf16", flash_attn="none", gpu="T4"))
    assert any("Hopper" in r for r in catalog.scenario_reasons(attn="flash_attention_3", dtype="bf16", flash_attn="none", gpu="A100"))
    assert catalog.scenario_reasons(attn="flash_attention_2", dtype="bf16", flash_attn="2.8.3", gpu="H20") == []


@pytest.mark.parametrize(
    ("smi", "name"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA A100 80GB PCIe", "A100"),
        ("NVIDIA H20", "H20"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("Tesla V100-SXM2-32GB", "V100"),
        ("NVIDIA GeForce RTX 4090", "RTX4090"),
        ("Some GPU", None),
    ],
)
def test_gpu_from_smi_name(smi: str, name: str | None) -> None:
    assert catalog.gpu_from_smi_name(smi) == name


def test_flash_wheel_name() -> None:
    assert catalog.flash_wheel_name("2.7.4.post1", "2.6.0", "12.4", "3.11") == "flash_attn-2.7.4.post1+cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
    assert catalog.flash_wheel_name("2.8.3", "2.8.0", "12.8", "3.12") == "flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp312-cp312-linux_x86_64.whl"
    assert catalog.flash_wheel_name("2.6.3", "2.4.0", "12.1", "3.10").startswith("flash_attn-2.6.3+cu123torch2.4")


# ---- current stacks (issue 13): each fact carries where it was read and when --------------------


def test_every_fact_names_a_source_and_a_date() -> None:
    entries: list[Any] = [*catalog.TORCH.values(), *catalog.FLASH_ATTN, *catalog.GPUS.values()]
    for src in [e.source for e in entries] + [catalog.CUDA_DRIVER_SOURCE, catalog.CUDA_ARCH_SOURCE, catalog.FA3, catalog.HF_KERNELS]:
        assert src.where and re.fullmatch(r"20\d\d-\d\d(-\d\d)?", src.checked), src


def test_torch_2_14_and_2_15_builds() -> None:
    assert catalog.TORCH["2.14"].default_cuda == "13.2" and "12.6" in catalog.TORCH["2.14"].cuda
    assert "12.6" not in catalog.TORCH["2.15"].cuda and "#190385" in catalog.TORCH["2.15"].source.where
    assert "12.8" not in catalog.TORCH["2.12"].cuda
    assert env(torch="2.14.0", cuda="13.2", gpu="B200", transformers="5.23.0", python="3.12") == []
    assert any("no cu126" in r for r in env(torch="2.15.0", cuda="12.6", gpu="H100", transformers="5.23.0"))


def test_cuda_13_drops_pre_turing() -> None:
    assert any("CUDA 13 dropped V100 (sm70)" in r for r in env(torch="2.13.0", cuda="13.0", gpu="V100"))
    assert not any("dropped" in r for r in env(torch="2.13.0", cuda="13.0", gpu="T4"))
    assert not any("dropped" in r for r in env(torch="2.13.0", cuda="12.6", gpu="V100"))


def test_blackwell_needs_new_cuda() -> None:
    assert catalog.GPUS["B200"].sm == "sm100" and catalog.GPUS["B300"].sm == "sm103" and catalog.GPUS["RTX5090"].sm == "sm120"
    assert any("B200 (sm100) needs CUDA ≥ 12.8" in r for r in env(torch="2.9.0", cuda="12.6", gpu="B200"))
    assert any("B300 (sm103) needs CUDA ≥ 12.9" in r for r in env(torch="2.9.0", cuda="12.8", gpu="B300"))
    assert env(torch="2.9.0", cuda="12.8", gpu="RTX5090") == []


def test_driver_per_cuda_major() -> None:
    assert catalog.min_driver("13.2") == "580.65.06" and catalog.min_driver("12.8") == "525.60.13" and catalog.min_driver("none") is None


@pytest.mark.parametrize(
    ("smi", "name"), [("NVIDIA B300 SXM6 AC", "B300"), ("NVIDIA GeForce RTX 5090", "RTX5090"), ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTXPRO6000")]
)
def test_new_gpu_names(smi: str, name: str) -> None:
    assert catalog.gpu_from_smi_name(smi) == name


def test_catalog_command_prints_facts_with_sources(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from envmatrix.cli import main

    assert main(["catalog", "--format", "json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    t215 = next(t for t in facts["torch"] if t["release"] == "2.15")
    assert t215["cuda"] == ["13.0", "13.2"] and t215["cxx11_abi"] is True and "#190385" in t215["source"]
    assert {g["name"] for g in facts["gpus"]} >= {"A100", "H20", "H100", "H200", "B200", "B300", "RTX5090"}
    assert facts["cuda"]["min_driver"]["13"] == "580.65.06" and facts["cuda"]["cuda13_min_sm"] == "sm75"
    assert main(["catalog"]) == 0
    table = capsys.readouterr().out
    assert "B300" in table and "checked" in table and "CUDA 13.x ≥ 580.65.06" in table


def test_the_cxx11_abi_follows_the_build_not_only_the_release() -> None:
    # torch 2.6.0's cu126 build is the first with the CXX11 ABI (pytorch PR #142064); its cu124 build is not
    assert catalog.cxx11_abi("2.6.0", "12.6") and not catalog.cxx11_abi("2.6.0", "12.4") and not catalog.cxx11_abi("2.5.1", "12.1")
    assert catalog.cxx11_abi("2.7.1") and not catalog.cxx11_abi("2.6.0")
    assert catalog.flash_wheel_name("2.7.4.post1", "2.6.0", "12.6", "3.11").endswith("cu12torch2.6cxx11abiTRUE-cp311-cp311-linux_x86_64.whl")
    assert catalog.flash_wheel_name("2.7.4.post1", "2.6.0", "12.4", "3.11").endswith("cu12torch2.6cxx11abiFALSE-cp311-cp311-linux_x86_64.whl")
    wheels = catalog.flash_wheels("2.7.4.post1")
    assert wheels is not None and wheels.abis == (False, True) and "v2.7.4.post1" in wheels.source.where
    assert not catalog.release_wheel_reasons("2.7.4.post1", torch="2.5.1", cuda="12.1", python="3.11")
    assert catalog.release_wheel_reasons("2.7.4.post1", torch="2.5.0", cuda="12.4", python="3.11")  # built against 2.5.1 only


def test_cublas_per_build_and_the_h20_sigfpe_lead() -> None:
    assert (catalog.cublas("12.1"), catalog.cublas("12.4"), catalog.cublas("13.0")) == ("12.1.3.1", "12.4.5.8", None)
    lead = catalog.h20_sigfpe_lead("12.1", "H20")
    assert lead is not None and "12.1.3.1" in lead and "#152017" in lead
    assert catalog.h20_sigfpe_lead("12.1", "A100") is None and catalog.h20_sigfpe_lead("12.4", "H20") is None
    t25 = next(t for t in catalog.as_dict()["torch"] if t["release"] == "2.5")  # type: ignore[attr-defined]
    assert t25["cublas"] == {"12.1": "12.1.3.1", "12.4": "12.4.5.8"} and t25["cxx11_abi_builds"] == []
    t26 = next(t for t in catalog.as_dict()["torch"] if t["release"] == "2.6")  # type: ignore[attr-defined]
    assert t26["cxx11_abi_builds"] == ["12.6"]
