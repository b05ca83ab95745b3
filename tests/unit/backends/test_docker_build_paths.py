"""Every build path of the probe image works or is refused before the build: the build arguments a build from
source gets (its requirements, FLASH_ATTENTION_FORCE_BUILD, MAX_JOBS, a devel base), DS_BUILD_OPS=1 refused
without CUDA, a base without nvcc refused, plain-http indexes trusted by host. The Dockerfile steps themselves
run in the GPU rehearsal (tests/rehearsal.py) and the docker integration tests."""

from __future__ import annotations

from typing import Any

import pytest
from simulated import FakeDocker

from envmatrix.backends import BuildFailed
from envmatrix.backends.docker import DockerBackend, build_jobs, plain_http_hosts
from envmatrix.host.pipconfig import PipSettings
from envmatrix.plan.cells import Environment
from envmatrix.plan.install import FLASH_SOURCE_BUILD_ENV, SOURCE_BUILD_REQUIREMENTS, Sources, install_set

PIP = PipSettings(None, (), ())
FLASH = Environment("12.8", "2.8.0", "4.57.6", "2.8.3", "H100", "3.12")
DEEPSPEED = Environment("12.8", "2.8.0", "4.57.6", "none", "H100", "3.12", (("deepspeed", "0.15.4"),))


def backend(client: Any, sources: Sources) -> DockerBackend:
    return DockerBackend(sources=sources, client=client)


def test_flash_attn_from_source_gets_its_requirements_the_forced_build_and_the_hosts_jobs_on_a_devel_base() -> None:
    sources = Sources(PIP, flash_attn=("releases", "sdist"), build_from_source=True)
    args = backend(FakeDocker(), sources).build_args(FLASH)
    assert args["SOURCE_BUILD"].split() == list(SOURCE_BUILD_REQUIREMENTS)
    assert args["FLASH_BUILD_ENV"] == " ".join(f"{k}={v}" for k, v in FLASH_SOURCE_BUILD_ENV) == "FLASH_ATTENTION_FORCE_BUILD=TRUE"
    assert args["MAX_JOBS"] == str(build_jobs()) and int(args["MAX_JOBS"]) >= 1
    assert "cudnn-devel" in args["BASE_IMAGE"] and args["COMPILER"] == "1"  # nvcc, and gcc with Python.h


def test_wheels_only_get_no_source_build_arguments() -> None:
    args = backend(FakeDocker(), Sources(PIP, flash_attn=("wheelhouse", "releases"))).build_args(FLASH)
    assert not {"SOURCE_BUILD", "FLASH_BUILD_ENV", "MAX_JOBS"} & set(args) and "runtime" in args["BASE_IMAGE"]


def test_ds_build_ops_builds_without_isolation_on_a_devel_base() -> None:
    wanted = install_set(DEEPSPEED, Sources(PIP, build_from_source=True))
    assert ("DS_BUILD_OPS", "1") in wanted.build_env and wanted.toolkit and "cudnn-devel" in str(wanted.base_image)
    args = backend(FakeDocker(), Sources(PIP, build_from_source=True)).build_args(DEEPSPEED)
    assert "DS_BUILD_OPS=1" in args["BUILD_ENV"] and args["SOURCE_BUILD"]  # the Dockerfile adds --no-build-isolation for it


def test_ds_build_ops_in_a_cpu_environment_is_refused_before_the_build() -> None:
    cpu = Environment("none", "2.13.0", "4.57.6", "none", "cpu", "3.11", (("deepspeed", "0.15.4"),))
    b = backend(FakeDocker(), Sources(PIP, build_from_source=True))
    with pytest.raises(BuildFailed, match=r"refused before building .*DS_BUILD_OPS=1 compiles DeepSpeed's CUDA ops"):
        b.check_source_build(cpu, {"BASE_IMAGE": "envmatrix-base:bookworm"})


class NoNvcc(FakeDocker):
    """An engine whose base image has no nvcc: the check container exits 1."""

    def __init__(self) -> None:
        super().__init__()
        outer = self

        class Images:
            def get(self, ref: str) -> object:
                return object()

        class Containers:
            def run(self, image: str, command: list[str], **options: object) -> bytes:
                from docker.errors import ContainerError

                outer.started.append((image, command, options))
                raise ContainerError("c", 1, " ".join(command), image, b"")

        self.images = Images()  # type: ignore[assignment]
        self.containers = Containers()  # type: ignore[assignment]


def test_a_base_without_nvcc_is_refused_before_the_build() -> None:
    client = NoNvcc()
    sources = Sources(PIP, flash_attn=("sdist",), build_from_source=True, base_images={"12.8": "nvidia/cuda:12.8.1-runtime-ubuntu24.04"})
    with pytest.raises(BuildFailed, match=r"has no nvcc, which flash-attn 2\.8\.3: built from source .* use a CUDA devel base"):
        backend(client, sources).check_source_build(FLASH, {"BASE_IMAGE": "nvidia/cuda:12.8.1-runtime-ubuntu24.04"})
    ((image, command, _),) = client.started
    assert image == "nvidia/cuda:12.8.1-runtime-ubuntu24.04" and "nvcc" in command[-1]


def test_plain_http_indexes_are_trusted_by_host_and_https_ones_are_not() -> None:
    urls = ["http://172.17.0.1:47613/cu128", "https://mirror.example/simple http://pypi.corp:8080/simple", "", "http://user:pw@evil/simple"]
    assert plain_http_hosts(urls) == ["172.17.0.1:47613", "pypi.corp:8080"]
