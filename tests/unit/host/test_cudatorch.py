"""The CUDA torch `nox -s gpu-tests` installs: the newest build of the release that the host's driver runs."""

from __future__ import annotations

import pytest

from envmatrix.host.cudatorch import NoCudaTorch, cuda_torch_build, cuda_torch_install_args


def test_a_driver_from_580_gets_the_newest_cuda_13_build() -> None:
    assert cuda_torch_build("2.13.0", "580.65.06") == "13.2"


def test_a_driver_below_580_gets_a_cuda_12_build() -> None:
    assert cuda_torch_build("2.13.0", "570.86.15") == "12.6"
    assert cuda_torch_install_args("2.8.0", "570.86.15") == ["torch==2.8.0+cu129", "--extra-index-url", "https://download.pytorch.org/whl/cu129"]


def test_the_mirror_variable_names_the_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVMATRIX_TORCH_INDEX", "http://mirror.example/whl/")
    assert cuda_torch_install_args("2.13.0", "580.65.06")[-1] == "http://mirror.example/whl/cu132"


@pytest.mark.parametrize(
    ("version", "driver", "said"),
    [("2.13.0", None, "no NVIDIA GPU"), ("2.15.0", "570.86.15", "needs a newer driver"), ("1.13.0", "580.65.06", "not in the catalog")],
)
def test_no_build_fits_says_why(version: str, driver: str | None, said: str) -> None:
    with pytest.raises(NoCudaTorch, match=said):
        cuda_torch_build(version, driver)
