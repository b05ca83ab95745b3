"""bench/bench_images.py without a registry: what it compares, the manifest API as Docker Hub answers it (a
fake urlopen), and the unreachable registry, which gives no figures and exit 1."""

from __future__ import annotations

import io
import json
import sys
import urllib.error
import urllib.request
from email.message import Message
from pathlib import Path

import pytest

from bench import bench_images

ROOT = Path(__file__).resolve().parents[2]
INDEX = {
    "manifests": [
        {"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64"}},
        {"digest": "sha256:amd", "platform": {"os": "linux", "architecture": "amd64"}},
    ]
}


def test_references_name_their_registry() -> None:
    assert bench_images.parse_ref("nvidia/cuda:12.8.1-runtime-ubuntu22.04") == ("registry-1.docker.io", "nvidia/cuda", "12.8.1-runtime-ubuntu22.04")
    assert bench_images.parse_ref("nvcr.io/nvidia/cuda:13.0.1-runtime-ubuntu22.04") == ("nvcr.io", "nvidia/cuda", "13.0.1-runtime-ubuntu22.04")
    assert bench_images.parse_ref("debian") == ("registry-1.docker.io", "library/debian", "latest")
    assert bench_images.parse_ref("localhost:5000/probe:1") == ("localhost:5000", "probe", "1")


def test_the_gpu_profile_compares_its_runtime_bases_with_cudnn_devel() -> None:
    compare = bench_images.pairs(ROOT / "matrix.yaml", "gpu")
    # each runtime base is compared with the cudnn-devel base of the same CUDA and the same Ubuntu release (cu121 builds sit on 22.04)
    assert compare and all("-runtime-ubuntu" in image and devel == image.replace("-runtime-", "-cudnn-devel-") for image, (_, devel) in compare.items())
    assert all(image.split(":")[1].split("-")[0] == devel.split(":")[1].split("-")[0] for image, (_, devel) in compare.items())  # same CUDA


def test_the_size_is_the_platforms_compressed_layers_behind_an_anonymous_token(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []

    def urlopen(request: urllib.request.Request | str, timeout: float = 0) -> io.BytesIO:
        url = request if isinstance(request, str) else request.full_url
        auth = "" if isinstance(request, str) else request.get_header("Authorization") or ""
        asked.append(url)
        if url.startswith("https://auth.docker.io/token?"):
            assert "scope=repository%3Anvidia%2Fcuda%3Apull" in url and "service=registry.docker.io" in url
            return io.BytesIO(json.dumps({"token": "t0k"}).encode())
        if auth != "Bearer t0k":
            headers = Message()
            headers["WWW-Authenticate"] = 'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:nvidia/cuda:pull"'
            raise urllib.error.HTTPError(url, 401, "Unauthorized", headers, None)
        body = INDEX if url.endswith("/manifests/12.8.1-runtime-ubuntu22.04") else {"layers": [{"size": 1000}, {"size": 234}]}
        assert url.endswith(("/manifests/12.8.1-runtime-ubuntu22.04", "/manifests/sha256:amd"))
        return io.BytesIO(json.dumps(body).encode())

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    assert bench_images.pulled_size("nvidia/cuda:12.8.1-runtime-ubuntu22.04") == 1234
    assert asked[0] == "https://registry-1.docker.io/v2/nvidia/cuda/manifests/12.8.1-runtime-ubuntu22.04"


def test_an_unreachable_registry_gives_no_figures_and_exit_1(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def unreachable(request: object, timeout: float = 0) -> None:
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(urllib.request, "urlopen", unreachable)
    monkeypatch.setattr(sys, "argv", ["bench_images.py"])
    assert bench_images.main() == 1
    out = capsys.readouterr().out
    assert out.startswith("could not reach the registry registry-1.docker.io for nvidia/cuda:") and "Name or service not known" in out
    assert "the images it would compare" in out and "-cudnn-devel-ubuntu24.04" in out and "GB" not in out
