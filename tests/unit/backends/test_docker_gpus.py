"""Which GPUs the docker backend asks for and how it names them to a forked cell, checked with a fake engine
(tests/simulated.py): only the runner's own GPUs, and UUIDs only where the environment's vLLM release takes them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from simulated import MIXED, FakeDocker, fake_uuid, smi_lines

from envmatrix.backends import Prepared
from envmatrix.backends.docker import DockerBackend
from envmatrix.host.gpunames import in_container
from envmatrix.host.gpus import HostGpus, _visible, parse_query
from envmatrix.host.pipconfig import PipSettings
from envmatrix.plan.cells import Environment
from envmatrix.plan.install import Sources
from envmatrix.run.forkclient import Ended, HelperFailed
from envmatrix.spec.matrix import Scenario

READY = Prepared(python="python", seconds=0.0, reused=True, facts={"image": "envmatrix-probe:0123456789abcdef"})
DDP2 = Scenario("ddp2", world_size=2)
#: A mixed host as nvidia-smi lists it (A100 at 0 and 2, H20 at 1 and 3), each GPU with its UUID.
HOST = HostGpus(tuple(n for n, *_ in MIXED), "A100", parse_query(smi_lines(MIXED)))


def backend(client: FakeDocker, gpus: HostGpus = HOST) -> DockerBackend:
    made = DockerBackend(sources=Sources(PipSettings(None, (), ())), client=client, gpus=gpus)
    made.fork = True
    return made


@pytest.mark.parametrize(
    ("vllm", "expected"),
    [
        ("none", [fake_uuid(1), fake_uuid(3)]),  # no vLLM: UUIDs, which name the same GPU for everyone
        ("0.10.2", ["1", "3"]),  # a vLLM that reads CUDA_VISIBLE_DEVICES with int(): the container's own indexes
        ("0.23.0", ["1", "3"]),  # released 2026-06-14, before the UUID fix (vLLM PR #45026, merged 2026-06-20): indexes
        ("0.24.0", [fake_uuid(1), fake_uuid(3)]),
    ],
)
def test_a_forked_vllm_cell_gets_gpus_in_the_form_its_release_accepts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vllm: str, expected: list[str]) -> None:
    requests: list[dict[str, Any]] = []
    monkeypatch.setattr("envmatrix.backends.docker.run_forked", lambda helper, request, **kw: requests.append(request) or Ended(0, False, 0.1))
    made = backend(FakeDocker())
    env = Environment("12.8", "2.8.0", "4.57.6", "none", "H20", "3.12", packages=(("trl", "0.19.1"), ("vllm", vllm)))
    made.envs_of[str(READY.facts["image"])] = env
    monkeypatch.setattr(made.helpers, "helper", lambda key, start: object())
    made.run(READY, DDP2, tmp_path / "runs" / "cell", tmp_path / "logs" / "cell.log", timeout=60, gpu_ids=[1, 3])
    assert requests[0]["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(expected)


def test_container_indexes_follow_the_runner_gpus_it_was_given() -> None:
    """A runner given GPUs 1 and 3 (CUDA_VISIBLE_DEVICES=1,3): its helper's container sees them as 0 and 1."""
    assert in_container(HOST, [3], [1, 3], {"vllm": "0.10.2"}) == ["1"]
    assert in_container(HOST, [1, 3], [1, 3], {"vllm": "0.10.2"}) == ["0", "1"]
    assert in_container(HOST, [3], [1, 3], {"vllm": "not-a-version"}) == ["1"]  # unreadable: the form every release takes


def test_a_runner_given_two_gpus_gives_its_helper_only_those(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two runners on one host, each given its GPUs (CUDA_VISIBLE_DEVICES=1,3 and 0,2): neither's helper container
    asks the engine for the other's GPUs."""
    mine = _visible(parse_query(smi_lines(MIXED)), {"CUDA_VISIBLE_DEVICES": "1,3"})
    monkeypatch.setattr("envmatrix.backends.docker.connect_when_ready", lambda *a: (_ for _ in ()).throw(HelperFailed("not started")))
    client = FakeDocker()
    made = backend(client, gpus=HostGpus(tuple(g.name for g in mine), mine[0].matrix_name, mine))
    with pytest.raises(HelperFailed):
        made._start_helper("envmatrix-probe:0123456789abcdef", tmp_path / "runs", f"{os.getuid() or 1000}:{os.getgid() or 1000}", [3])
    ((_, _, options),) = client.started
    (request,) = options["device_requests"]
    assert request["DeviceIDs"] == [fake_uuid(1), fake_uuid(3)]
