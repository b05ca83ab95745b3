"""The docker backend's container configuration, checked without a GPU or an engine: a fake Docker client
records what a cell's container, the fork helper and a forked cell are started with (tests/simulated.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from simulated import MIXED, FakeContainer, FakeDocker, fake_uuid, smi_lines

from envmatrix.backends import Prepared
from envmatrix.backends.docker import HELPER_DIR, RUNS_DIR, DockerBackend
from envmatrix.host.gpus import HostGpus, parse_query
from envmatrix.host.pipconfig import PipSettings
from envmatrix.plan.install import Sources
from envmatrix.run.forkclient import Ended, HelperFailed
from envmatrix.spec.matrix import Scenario
from probes import caches

READY = Prepared(python="python", seconds=0.0, reused=True, facts={"image": "envmatrix-probe:0123456789abcdef"})
DDP2 = Scenario("ddp2", world_size=2)


#: A runner's GPUs as nvidia-smi lists them, each with its UUID (a mixed host: A100 at 0 and 2, H20 at 1 and 3).
HOST = HostGpus(tuple(n for n, *_ in MIXED), "A100", parse_query(smi_lines(MIXED)))


def backend(client: FakeDocker, *, fork: bool = False, gpus: HostGpus = HOST) -> DockerBackend:
    made = DockerBackend(sources=Sources(PipSettings(None, (), ())), client=client, gpus=gpus)
    made.fork = fork
    return made


def run_cell(tmp_path: Path, client: FakeDocker, gpu_ids: list[int], scenario: Scenario = DDP2) -> tuple[Any, dict[str, Any]]:
    """Run one cell in a container of its own; what it returned and the options its container got."""
    done = backend(client).run(READY, scenario, tmp_path / "runs" / "cell", tmp_path / "logs" / "cell.log", timeout=60, gpu_ids=gpu_ids)
    ((_, _, options),) = client.started
    return done, options


def assert_locked_down(options: dict[str, Any]) -> None:
    """What every probe container must have, cell or helper: no network, no capabilities, no new
    privileges, a read-only root, a user other than root, NCCL's shared memory in a private IPC namespace."""
    assert options["network_mode"] == "none"
    assert options["cap_drop"] == ["ALL"] and options["security_opt"] == ["no-new-privileges"]
    assert options["read_only"] is True and set(options["tmpfs"]) == {"/tmp", "/home/probe"}
    # compiled caches (Triton, inductor, vLLM, extensions) load from there: Docker's tmpfs default is noexec
    assert all("exec" in opts.split(",") and "noexec" not in opts.split(",") for opts in options["tmpfs"].values())
    env = options["environment"]
    assert env["HOME"] == "/home/probe" and all(env[name].startswith("/home/probe/") for name in caches.FOLDERS if name != "HOME")
    uid, _, gid = options["user"].partition(":")
    assert uid.isdigit() and gid.isdigit() and uid != "0"
    assert {f"uid={uid}", f"gid={gid}"} <= set(options["tmpfs"]["/home/probe"].split(","))  # HOME is the cell user's to write
    assert options["shm_size"] == "2g" and options["ipc_mode"] == "private"
    assert options["environment"]["NCCL_SOCKET_IFNAME"] == "lo" and options["environment"]["GLOO_SOCKET_IFNAME"] == "lo"
    assert options["init"] is True and options["labels"]["envmatrix"] == "cell"


def test_a_cells_container_gets_exactly_its_gpus_by_uuid(tmp_path: Path) -> None:
    done, options = run_cell(tmp_path, FakeDocker(), [1, 3])
    assert_locked_down(options)
    (request,) = options["device_requests"]  # the engine numbers the host's GPUs, not this runner's: a UUID is the same to both
    assert request["DeviceIDs"] == [fake_uuid(1), fake_uuid(3)] and request["Capabilities"] == [["gpu"]] and request["Count"] == 0
    assert [dict(u) for u in options["ulimits"]] == [{"Name": "memlock", "Soft": -1, "Hard": -1}]
    # the device request picks the GPUs (the engine sets NVIDIA_VISIBLE_DEVICES from it); inside they are
    # numbered from 0, so a host index in CUDA_VISIBLE_DEVICES would name the wrong GPU or none
    assert not {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"} & set(options["environment"])
    assert options["volumes"] == {str((tmp_path / "runs" / "cell").resolve()): {"bind": "/out", "mode": "rw"}}
    assert done.exit_code == 0 and not done.timed_out and done.launch == "container of its own"


def test_a_cpu_cells_container_asks_for_no_gpu(tmp_path: Path) -> None:
    _, options = run_cell(tmp_path, FakeDocker(), [], Scenario("fp32"))
    assert_locked_down(options)
    assert "device_requests" not in options and "ulimits" not in options


def test_a_cells_container_is_killed_at_its_timeout_and_always_removed(tmp_path: Path) -> None:
    client = FakeDocker(FakeContainer(hangs=True, output=b"step 1\n"))
    done, _ = run_cell(tmp_path, client, [0])
    assert done.timed_out and done.exit_code == 137 and client.container.killed and client.container.removed
    assert "killed after the 60 s timeout" in (tmp_path / "logs" / "cell.log").read_text()


def test_the_fork_helper_has_the_cells_settings_and_is_removed_when_it_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def never_ready(*args: object) -> object:
        raise HelperFailed("the helper did not start")

    monkeypatch.setattr("envmatrix.backends.docker.connect_when_ready", never_ready)
    client = FakeDocker()
    runs = tmp_path / "runs"
    with pytest.raises(HelperFailed):
        backend(client, fork=True)._start_helper("envmatrix-probe:0123456789abcdef", runs, f"{os.getuid() or 1000}:{os.getgid() or 1000}", [1, 3])
    ((_, command, options),) = client.started
    assert_locked_down(options)
    (request,) = options["device_requests"]  # every GPU of this runner, never the host's others: each forked cell is shown its own
    assert request["DeviceIDs"] == [fake_uuid(i) for i in range(4)] and request["Capabilities"] == [["gpu"]]
    folder = next(host for host, bind in options["volumes"].items() if bind["bind"] == HELPER_DIR)
    assert options["volumes"][str(runs)] == {"bind": RUNS_DIR, "mode": "rw"} and options["labels"]["envmatrix.helper"]
    assert client.container.removed and not Path(folder).exists()  # nothing outlives a failed start
    assert "--socket" in command


def test_a_forked_cell_is_shown_exactly_its_gpus_in_nvidia_smi_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    requests: list[dict[str, Any]] = []

    def forked(helper: object, request: dict[str, Any], **kw: object) -> Ended:
        requests.append(request)
        return Ended(0, False, 0.1)

    monkeypatch.setattr("envmatrix.backends.docker.run_forked", forked)
    made = backend(FakeDocker(), fork=True)
    keys: list[str] = []
    monkeypatch.setattr(made.helpers, "helper", lambda key, start: keys.append(key) or object())
    done = made.run(READY, DDP2, tmp_path / "runs" / "cell", tmp_path / "logs" / "cell.log", timeout=60, gpu_ids=[1, 3])
    (request,) = requests
    # by UUID: the helper's container numbers the GPUs it was given from 0, whatever nvidia-smi's indexes are outside
    assert request["env"] == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": f"{fake_uuid(1)},{fake_uuid(3)}"} and request["ranks"] == 2
    assert done.exit_code == 0 and done.launch == "2 ranks forked in the environment's container" and len(keys) == 1


def test_an_engine_that_may_not_lift_memlock_runs_gpu_cells_with_its_default_and_says_so(tmp_path: Path) -> None:
    client = FakeDocker()
    client.container.refuse_start = ["runc create failed: error setting rlimits for ready process: error setting rlimit type 8: operation not permitted"]
    done = backend(client).run(READY, DDP2, tmp_path / "runs" / "cell", tmp_path / "logs" / "cell.log", timeout=60, gpu_ids=[0])
    first, second = (o for _, _, o in client.started)
    assert "ulimits" in first and "ulimits" not in second and done.exit_code == 0
    assert "may not lift the locked-memory limit" in (tmp_path / "logs" / "cell.log").read_text()


def test_another_start_failure_is_not_retried(tmp_path: Path) -> None:
    from docker.errors import APIError

    client = FakeDocker()
    client.container.refuse_start = ["no such image"]
    with pytest.raises(APIError):
        backend(client).run(READY, DDP2, tmp_path / "runs" / "cell", tmp_path / "logs" / "cell.log", timeout=60, gpu_ids=[0])
    assert len(client.started) == 1 and client.container.removed
