"""The probe image's GPU-path steps on a real engine, with the CPU base (no registry, no GPU here): the cells'
container options let compiled caches load from /tmp and HOME (Docker's tmpfs is noexec by default); the user
step works on a base that already has uid 1000 (ubuntu 24.04 does); the Python step finds the base's own."""

from __future__ import annotations

import io
import os
import tarfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from envmatrix.backends.docker import HOME_IN_CONTAINER, STEPS, DockerBackend
from envmatrix.facts.catalog import CPU_BASE_IMAGE as CPU_BASE
from envmatrix.host.pipconfig import PipSettings
from envmatrix.plan.install import Sources

pytestmark = pytest.mark.integration

#: Copy a shared library of the image to /tmp and HOME and load each copy: what Triton, inductor, vLLM and
#: torch's extensions do with the libraries they compile into their caches.
LOAD = (
    "import ctypes, glob, shutil, sys\n"
    "lib = sorted(glob.glob('/usr/lib/x86_64-linux-gnu/libm.so.6') + glob.glob('/lib/x86_64-linux-gnu/libm.so.6'))[0]\n"
    "for folder in ('/tmp', sys.argv[1]):\n"
    "    copy = shutil.copy(lib, folder + '/compiled.so')\n"
    "    ctypes.CDLL(copy)\n"
    "    print('loaded', copy)\n"
)


@pytest.fixture
def client(docker_client: Any) -> Any:
    """The engine (the root conftest's `docker_client`), under the name these tests use."""
    return docker_client


def cell_options(client: Any, tmp_path: Path) -> dict[str, Any]:
    backend = DockerBackend(sources=Sources(PipSettings(None, (), ())), client=client)
    user = f"{os.getuid() or 1000}:{os.getgid() or 1000}"
    return {**backend._options(user, [], {}), "detach": False, "remove": True, "stdout": True, "stderr": True}


@pytest.fixture
def with_user_step(client: Any) -> Any:
    """The CPU base after the image's user step (its /home/probe exists, as in every probe image: a tmpfs over
    an image folder is not the fresh 1777 one Docker makes where there is none)."""
    container = client.containers.create(CPU_BASE, ["sh", "/opt/steps/user.sh"], network_disabled=True)
    container.put_archive("/opt", steps_archive())
    container.start()
    container.wait(timeout=120)
    image = container.commit(repository="envmatrix-test-user-step", tag=uuid.uuid4().hex[:12])
    container.remove(force=True)
    yield image
    client.images.remove(image.id, force=True)


def test_a_library_compiled_into_tmp_or_home_loads_in_a_cells_container(client: Any, tmp_path: Path, with_user_step: Any) -> None:
    options = cell_options(client, tmp_path)
    for image in (CPU_BASE, with_user_step.id):
        out = client.containers.run(image, ["python3", "-c", LOAD, HOME_IN_CONTAINER], **options).decode()
        assert f"loaded /tmp/compiled.so\nloaded {HOME_IN_CONTAINER}/compiled.so" in out
    # the check can fail: Docker's default tmpfs (noexec) refuses the same load
    from docker.errors import ContainerError

    with pytest.raises(ContainerError, match="failed to map segment from shared object"):
        client.containers.run(CPU_BASE, ["python3", "-c", LOAD, HOME_IN_CONTAINER], **{**options, "tmpfs": {"/tmp": "", HOME_IN_CONTAINER: ""}})


def steps_archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(STEPS.iterdir()):
            tar.add(path, arcname=f"steps/{path.name}")
    return buf.getvalue()


def run_step(client: Any, image: str, command: str) -> tuple[int, str]:
    """A shell command as root in a container of `image` with dockerfiles/steps/ copied to /opt/steps."""
    container = client.containers.create(image, ["sh", "-c", command], network_disabled=True)
    try:
        container.put_archive("/opt", steps_archive())
        container.start()
        code = int(container.wait(timeout=300)["StatusCode"])
        return code, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)


@pytest.fixture
def base_with_uid_1000(client: Any) -> Any:
    """The CPU base with an account at uid 1000 already, as ubuntu:24.04 (and nvidia/cuda on it) has `ubuntu`."""
    container = client.containers.run(CPU_BASE, ["useradd", "--uid", "1000", "--create-home", "ubuntu"], detach=True, network_disabled=True)
    container.wait(timeout=120)
    tag = f"envmatrix-test-uid1000:{uuid.uuid4().hex[:12]}"
    repo, _, name = tag.partition(":")
    image = container.commit(repository=repo, tag=name)
    container.remove(force=True)
    yield image
    client.images.remove(image.id, force=True)


def test_the_user_step_keeps_a_bases_uid_1000_and_makes_one_elsewhere(client: Any, base_with_uid_1000: Any) -> None:
    code, out = run_step(client, base_with_uid_1000.id, "sh /opt/steps/user.sh && stat -c %u /home/probe")
    assert code == 0 and "uid 1000 exists (ubuntu): kept" in out and out.strip().endswith("1000"), out
    code, out = run_step(client, CPU_BASE, "sh /opt/steps/user.sh && getent passwd 1000")
    assert code == 0 and "uid 1000: probe made" in out and "probe:x:1000" in out, out
    # what the Dockerfile did before: stops the build on such a base
    code, out = run_step(client, base_with_uid_1000.id, "useradd --create-home --uid 1000 probe")
    assert code != 0 and "not unique" in out, out


def test_the_python_step_uses_the_bases_own_python_and_refuses_a_bad_version(client: Any) -> None:
    code, out = run_step(client, CPU_BASE, "sh /opt/steps/python.sh 3.11 0 && cat /opt/envmatrix-python.txt && /opt/venv/bin/python -V")
    assert code == 0 and "python 3.11: image" in out and "Python 3.11" in out, out
    code, out = run_step(client, CPU_BASE, "sh /opt/steps/python.sh '3.11; id' 0")
    assert code == 2 and "is not 3.MINOR" in out, out
