"""flash-attn sources: the order a profile declares, what each offers, and the facts a record keeps."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from envmatrix.errors import SpecError
from envmatrix.facts import catalog, flashsource
from envmatrix.spec.matrix import load

ARGS: dict[str, Any] = {"torch": "2.8.0", "cuda": "12.8", "python": "3.11", "abi": True}


def test_releases_page_when_the_catalog_predicts_a_wheel() -> None:
    pick = flashsource.choose("2.8.3", sources=("releases",), wheelhouse=None, **ARGS)
    assert pick.source == "releases"
    assert pick.location == f"{flashsource.RELEASES_URL}/v2.8.3/flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"


def test_wheelhouse_first_when_declared_first(tmp_path: Path) -> None:
    wheel = tmp_path / catalog.flash_wheel_name("2.8.3", "2.8.0", "12.8", "3.11", abi_flag=True)
    wheel.write_bytes(b"vetted wheel")
    pick = flashsource.choose("2.8.3", sources=("wheelhouse", "releases"), wheelhouse=tmp_path, **ARGS)
    assert pick.source == "wheelhouse" and pick.location == str(wheel)
    facts = flashsource.build_facts(pick, flashsource.fetch(pick, tmp_path / "cache"))
    assert facts == {"file": wheel.name, "sha256": hashlib.sha256(b"vetted wheel").hexdigest(), "source": "wheelhouse", "origin": str(wheel)}


def test_torch_without_official_wheel_falls_through_to_sdist_or_fails(tmp_path: Path) -> None:
    new = {**ARGS, "torch": "2.14.0", "cuda": "13.2"}
    pick = flashsource.choose("2.8.3", sources=("wheelhouse", "releases", "sdist"), wheelhouse=tmp_path, **new)
    assert pick.source == "sdist" and pick.install_args() == ["--no-build-isolation", "flash-attn==2.8.3"]
    with pytest.raises(flashsource.NoFlashSource, match=r"wheelhouse .*: no flash_attn-2.8.3\+cu13torch2.14.*releases page: no"):
        flashsource.choose("2.8.3", sources=("wheelhouse", "releases"), wheelhouse=tmp_path, **new)


def test_check_sources() -> None:
    assert flashsource.check_sources(["releases"], wheelhouse=None, build_from_source=False) == []
    assert "build_from_source: true" in flashsource.check_sources(["sdist"], wheelhouse=None, build_from_source=False)[0]
    assert "wheelhouse: folder" in flashsource.check_sources(["wheelhouse"], wheelhouse=None, build_from_source=False)[0]
    assert "unknown flash-attn source 'github'" in flashsource.check_sources(["github"], wheelhouse=None, build_from_source=False)[0]
    assert flashsource.default_sources("wheels", True) == ["wheelhouse", "releases", "sdist"]
    assert flashsource.default_sources(None, False) == ["releases"]


def test_spec_validates_flash_attn_sources(matrix: Any) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["profiles"]["gpu"]["flash_attn_sources"] = ["sdist", "mirror"]

    with pytest.raises(SpecError) as err:
        load(matrix(edit))
    text = str(err.value)
    assert "profiles.gpu.flash_attn_sources" in text and "build_from_source: true" in text and "unknown flash-attn source 'mirror'" in text

    def ok(data: dict[str, Any]) -> None:
        data["profiles"]["gpu"].update(flash_attn_sources=["wheelhouse", "releases"], wheelhouse="wheels")

    assert load(matrix(ok)).profiles["gpu"].flash_attn_sources == ("wheelhouse", "releases")
    assert load(matrix()).profiles["gpu"].flash_attn_sources == ("releases",)


@pytest.mark.parametrize(
    ("torch", "cuda", "abi", "expect"),
    [
        ("2.8.0", "12.8", True, "flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"),
        ("2.9.1", "13.0", True, "flash_attn-2.8.3+cu13torch2.9cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"),
        ("2.10.0", "12.8", True, "flash_attn-2.8.3+cu12torch2.10cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"),
        ("2.12.0", "13.2", True, "flash_attn-2.8.3+cu13torch2.12cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"),
        ("2.13.0", "12.6", False, "flash_attn-2.8.3+cu12torch2.13cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"),
        ("2.14.0", "13.2", True, "flash_attn-2.8.3+cu13torch2.14cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"),
        ("2.15.0", "13.0", True, "flash_attn-2.8.3+cu13torch2.15cxx11abiTRUE-cp311-cp311-linux_x86_64.whl"),
    ],
)
def test_wheel_name_prediction_torch_2_8_to_2_15(torch: str, cuda: str, abi: bool, expect: str) -> None:
    assert catalog.flash_wheel_name("2.8.3", torch, cuda, "3.11", abi_flag=abi) == expect


def test_releases_coverage_for_new_torch_is_none() -> None:
    """2.8.3's releases page stops at torch 2.8.0 and CUDA 12 (flash-attention #1967): newer torch needs another source."""
    assert catalog.release_wheel_reasons("2.8.3", torch="2.8.0", cuda="12.8", python="3.11") == []
    for torch in ("2.9.0", "2.13.0", "2.15.0"):
        assert any("publishes no wheel for torch" in r for r in catalog.release_wheel_reasons("2.8.3", torch=torch, cuda="12.8", python="3.11"))
    assert any("no wheel for CUDA 13.0" in r for r in catalog.release_wheel_reasons("2.8.3", torch="2.8.0", cuda="13.0", python="3.11"))


def test_an_images_flash_attn_record_reads_back_as_a_venvs() -> None:
    """The docker backend's flash-attn facts come from the record the image's step wrote, in the venv backend's form."""
    sha = "a" * 64
    text = f"releases flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp312-cp312-linux_x86_64.whl {sha} https://github.com/x/y.whl\n/opt/venv/lib/python3.12/site-packages/flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so\n"
    facts, library = flashsource.image_facts(text)
    assert facts == {
        "file": "flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp312-cp312-linux_x86_64.whl",
        "sha256": sha,
        "source": "releases",
        "origin": "https://github.com/x/y.whl",
    }
    assert library is not None and library.endswith("flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so")
    built, none = flashsource.image_facts("sdist flash-attn-2.8.3 - pypi\n")
    assert built["file"] == "flash-attn-2.8.3 (sdist, built here)" and built["sha256"] == "" and none is None
    with pytest.raises(ValueError, match="SOURCE FILE SHA256 ORIGIN"):
        flashsource.image_facts("garbage")
