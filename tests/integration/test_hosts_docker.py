"""Host checks on a real Docker engine (issue 40, item 7): labelled probe images listed and the superseded ones
pruned; the engine's free space measured where it sees its data root, and a build refused when it is short;
a folder the engine does not see found in seconds; the GPU check that starts a container (`--gpus`)."""

from __future__ import annotations

import io
import secrets
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envmatrix.backends import images
from envmatrix.backends.docker import DockerBackend
from envmatrix.errors import BackendError
from envmatrix.facts.catalog import CPU_BASE_IMAGE as CPU_BASE
from envmatrix.host import diskspace, dockerfs
from envmatrix.host.gpus import HostGpus, parse_query

pytestmark = pytest.mark.integration


@pytest.fixture
def client(docker_client: Any) -> Any:
    """The engine (the root conftest's `docker_client`), under the name these tests use."""
    return docker_client


@pytest.fixture
def repository(client: Any) -> Iterator[str]:
    """A repository of this test's own, so that pruning never touches anyone's real probe images; removed after."""
    name = f"envmatrix-probe-test-{secrets.token_hex(4)}"
    yield name
    for image in client.images.list(name=name):
        for tag in image.tags:
            client.images.remove(tag, force=True)


def build(client: Any, tag: str, labels: dict[str, str], payload: str) -> Any:
    """A tiny image on the Debian base, with `labels` (what the docker backend's build gives a probe image)."""
    dockerfile = f"FROM {CPU_BASE}\nRUN echo {payload} > /payload\n".encode()
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile), tag=tag, labels=labels, pull=False, rm=True)
    time.sleep(1.1)  # Created has a resolution of a second or better; two builds must not tie
    return image


def test_superseded_images_are_listed_and_pruned_only_with_yes(client: Any, repository: str) -> None:
    recipe = "0123456789abcdef"
    build(client, f"{repository}:old", images.labels("cpu-torch2.8.0-tf4.57.6-fanone-py3.12", recipe), "old")
    build(client, f"{repository}:new", images.labels("cpu-torch2.8.0-tf4.57.6-fanone-py3.12", recipe), "new")
    build(client, f"{repository}:other", images.labels("cpu-torch2.9.0-tf4.57.6-fanone-py3.12", recipe), "other")
    build(client, f"{repository}:unlabelled", {}, "unlabelled")
    states = {i.tag.split(":")[1]: i.state for i in images.probe_images(client, repository)}
    assert states == {"old": "superseded", "new": "current", "other": "current", "unlabelled": "unlabelled"}

    dry = images.prune(client, dry_run=True, repository=repository)
    assert [i.tag for i in dry.removed] == [f"{repository}:old"] and dry.freed > 0
    assert len(images.probe_images(client, repository)) == 4  # a dry run removes nothing

    done = images.prune(client, dry_run=False, repository=repository)
    assert [i.tag for i in done.removed] == [f"{repository}:old"]
    assert sorted(i.tag.split(":")[1] for i in images.probe_images(client, repository)) == ["new", "other", "unlabelled"]


def test_an_image_a_container_uses_is_kept(client: Any, repository: str) -> None:
    labels = images.labels("cpu-env", "r")
    build(client, f"{repository}:old", labels, "old")
    build(client, f"{repository}:new", labels, "new")
    container = client.containers.create(f"{repository}:old", ["true"])
    try:
        done = images.prune(client, dry_run=False, repository=repository)
        assert done.removed == [] and [i.tag for i in done.kept_in_use] == [f"{repository}:old"]
    finally:
        container.remove(force=True)


def test_free_space_is_measured_where_the_engine_keeps_its_data(client: Any) -> None:
    space = diskspace.measure(client, CPU_BASE)
    assert space is not None and space.how.startswith("df in a container")
    root = client.info()["DockerRootDir"]
    assert space.root == root
    if Path(root).exists():  # the same file system seen from here: the two readings agree within a GiB (others write meanwhile)
        import os

        st = os.statvfs(root)
        assert abs(st.f_bavail * st.f_frsize - space.free) < diskspace.GIB


def test_a_build_that_would_not_fit_is_refused_with_both_figures(client: Any) -> None:
    space = diskspace.measure(client, CPU_BASE)
    assert space is not None
    with pytest.raises(diskspace.NoSpace) as caught:
        diskspace.require(space, space.free + diskspace.GIB, "building envmatrix-probe:x")
    text = str(caught.value)
    assert diskspace.gib(space.free) + " free" in text and "needs about " + diskspace.gib(space.free + diskspace.GIB) in text
    assert caught.value.exit_code == 3 and "envmatrix images --prune" in text
    assert "needs about" in diskspace.require(space, diskspace.GIB // 1024, "building x")  # one that fits passes, saying both


def test_a_folder_the_engine_sees_passes(client: Any, tmp_path: Path) -> None:
    started = time.monotonic()
    dockerfs.SharedFolders(client).require_runner_folders(CPU_BASE, tmp_path)
    assert time.monotonic() - started < 30
    assert list(tmp_path.iterdir()) == []  # the marker is gone


def test_a_folder_the_engine_does_not_see_is_found_in_seconds(client: Any) -> None:
    """A runner in a container with the host's docker.sock names its own folders; the engine mounts the host's folders
    of the same names. Simulated on this one host: the real engine and a real container, but the mount's source is
    swapped for another (empty) host folder, which is what the engine's side of such a runner is."""
    folder = Path(tempfile.mkdtemp(prefix="envmatrix-notshared-"))
    runner_side, engine_side = folder / "runner", folder / "engine"
    runner_side.mkdir()
    engine_side.mkdir()

    class ElsewhereEngine:
        def __init__(self, real: Any) -> None:
            self.real = real
            self.containers = self

        def create(self, image: str, command: list[str], **options: Any) -> Any:
            ((_, bind),) = options["volumes"].items()
            return self.real.containers.create(image, command, **{**options, "volumes": {str(engine_side): bind}})

    started = time.monotonic()
    try:
        with pytest.raises(dockerfs.NotShared, match=r"does not see .*docker\.sock.*same path") as caught:
            dockerfs.SharedFolders(ElsewhereEngine(client)).require(CPU_BASE, runner_side)
        assert time.monotonic() - started < 30 and caught.value.exit_code == 3
        assert list(runner_side.iterdir()) == []  # the marker is removed either way
    finally:
        runner_side.rmdir()
        engine_side.rmdir()
        folder.rmdir()


def test_gpu_check_starts_a_container_with_the_gpus(client: Any) -> None:
    """The check agrees with the engine itself: `docker run --gpus device=UUID` on the same engine. Where the engine cannot
    give a container a GPU (no NVIDIA toolkit) the check fails in the engine's words, read in seconds before any build;
    where a toolkit answers (CI's engine runs the rehearsal's stand-in hook) it passes, once per backend."""
    import shutil
    import subprocess

    if shutil.which("docker") is None:
        pytest.skip("needs the docker command line to ask the engine independently")
    uuid = "GPU-5e1c0000-0000-0000-0000-000000000000"
    one = parse_query(f"0, NVIDIA H20, 550.54.15, 97871, 9.0, {uuid}")
    backend = DockerBackend(client=client, gpus=HostGpus(("NVIDIA H20",), "H20", one))
    cli = subprocess.run(
        ["docker", "run", "--rm", "--gpus", f"device={uuid}", "--user", "65534:65534", "--entrypoint", "sh", CPU_BASE, "-c", "test -e /dev/nvidiactl"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if cli.returncode == 0:
        started = time.monotonic()
        backend.try_gpu_container(CPU_BASE)
        assert backend._gpu_container_ok
        backend.try_gpu_container(CPU_BASE)  # once per backend: the second call starts nothing
        assert time.monotonic() - started < 60
        return
    with pytest.raises(BackendError, match="could not start a container with a GPU") as caught:
        backend.try_gpu_container(CPU_BASE)
    said = str(caught.value)
    if "nvidia" in cli.stderr.lower() or "device driver" in cli.stderr:
        assert "device driver" in said or "nvidia" in said.lower()
    else:  # the container started without the control node
        assert "no /dev/nvidiactl" in said
    assert not backend._gpu_container_ok


def test_the_backend_builds_images_with_their_labels(client: Any, repository: str, tmp_path: Path) -> None:
    """The docker backend's own build call (what prepare runs) gives the image its environment and recipe."""
    context = tmp_path / "context"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {CPU_BASE}\nRUN true\n")
    backend = DockerBackend(client=client, gpus=HostGpus((), "cpu"))
    log = tmp_path / "build.log"
    labels = images.labels("cpu-torch2.8.0-tf4.57.6-fanone-py3.12", "fedcba9876543210")
    backend._build_labelled(context, f"{repository}:built", {}, log, labels=labels, preface="free space on /var/lib/docker: 70.0 GiB")
    (found,) = images.probe_images(client, repository)
    assert (found.build_id, found.recipe, found.state) == ("cpu-torch2.8.0-tf4.57.6-fanone-py3.12", "fedcba9876543210", "current")
    assert log.read_text().startswith("free space on /var/lib/docker")


def test_a_run_short_of_space_stops_before_building_and_says_so(client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole path on the real engine: the runner prepares an environment whose image does not exist, the backend
    measures the data root, finds it short (the reserve raised above what is free: the only simulated part), and the
    run stops with exit status 3 before any build step; no record is written, no image built."""
    from rich.console import Console

    from envmatrix.plan.cells import Cell, Environment
    from envmatrix.run.runner import Paths, Runner
    from envmatrix.spec.matrix import Scenario

    monkeypatch.setattr(diskspace, "RESERVE_BYTES", 1 << 50)
    env = Environment("none", "2.13.0", "4.51.3", "none", "cpu", "3.11", packages=(("peft", "0.21.2"),))
    before = {i.tag for i in images.probe_images(client)}
    backend = DockerBackend(client=client, gpus=HostGpus((), "cpu"))
    runner = Runner(backend, Paths(tmp_path / "reports"), console=Console(file=io.StringIO()))
    started = time.monotonic()
    with pytest.raises(diskspace.NoSpace, match="not enough free space on the Docker engine's data root") as caught:
        runner.run([Cell(env, Scenario("fp32-sdpa"))])
    assert time.monotonic() - started < 120 and caught.value.exit_code == 3
    assert {i.tag for i in images.probe_images(client)} == before  # nothing built
    assert not list((tmp_path / "reports" / "results").glob("*.json"))


def test_labels_anyone_could_set_reach_the_terminal_escaped(
    client: Any, repository: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An image tagged into the repository by someone else, with labels that carry an escape sequence and rich markup."""
    from envmatrix.cli import main

    build(client, f"{repository}:x", {**images.labels("env\x1b[2J[bold red]boom[/]", "r"), images.RECIPE_LABEL: "\x1b]0;title\x07"}, "x")
    monkeypatch.setattr(images, "REPOSITORY", repository)
    assert main(["images"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "env\\x1b[2J[bold red]boom[/]" in out and "\\x1b]0;title\\x07" in out  # shown, escaped, markup not read
