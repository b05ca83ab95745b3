"""The scheduled watch with --propose: the GitHub workflow opens or updates a pull request with the proposed file and
the summary as its body (actionlint-clean; its script run for real against a git remote with a stand-in `gh`), the issue
only where nothing was proposed; Slurm's script says where the proposed file is."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from test_submit import actionlint

from envmatrix.cli import main
from envmatrix.spec.matrix import GpuTarget
from envmatrix.submit import WatchJob, github, propose_step, slurm

LABELS = ("self-hosted", "linux", "h20")


def job(propose: str | None = "requirements.txt") -> WatchJob:
    args = ["--file", "matrix.yaml", "--backend", "venv", "--reports", "reports", *(["--propose", propose] if propose else [])]
    return WatchJob("stack", "H20", GpuTarget(labels=LABELS, gpu_count=1), "0 6 * * 1", tuple(args), "reports")


def test_the_workflow_with_a_pull_request_step_passes_actionlint() -> None:
    text = github.render_watch(job())
    problems = [p for p in actionlint(text) if not (p["kind"] == "runner-label" and any(f'"{label}"' in p["message"] for label in LABELS))]
    assert problems == [], problems
    flow = yaml.safe_load(text)
    assert flow["permissions"] == {"contents": "write", "issues": "write", "pull-requests": "write"}
    steps = flow["jobs"]["watch"]["steps"]
    names = [s.get("name", "") for s in steps]
    pr, issue = names.index("open or update the pull request with the proposed change"), names.index("open or update the regression issue")
    assert names.index("watch the stack's new releases") < pr < issue
    assert steps[issue]["if"] == "steps.watch.outputs.status == '1' && steps.propose.outputs.proposed != 'true'"
    assert "envmatrix watch --profile stack --gpu H20 --file matrix.yaml --backend venv --reports reports --propose requirements.txt" in text


def test_without_propose_the_workflow_is_as_before() -> None:
    flow = yaml.safe_load(github.render_watch(job(None)))
    assert flow["permissions"] == {"contents": "read", "issues": "write"}
    assert not any(s.get("id") == "propose" for s in flow["jobs"]["watch"]["steps"])


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("open_pr", ["", "7"])
def test_the_pull_request_script_commits_pushes_and_opens_or_updates(tmp_path: Path, open_pr: str) -> None:
    remote, repo, bin_ = tmp_path / "remote.git", tmp_path / "repo", tmp_path / "bin"
    _git(tmp_path, "init", "-q", "--bare", str(remote))
    _git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "requirements.txt").write_text("torch==2.13.0+cpu\ntransformers==4.51.3\n")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    _git(repo, "remote", "add", "origin", str(remote))
    (repo / "reports" / "proposed").mkdir(parents=True)
    (repo / "reports" / "proposed" / "requirements.txt").write_text("torch==2.13.0+cpu\ntransformers==5.24.0\n")
    (repo / "reports" / "watch-summary.md").write_text("# summary\n")
    bin_.mkdir()
    (bin_ / "gh").write_text(f'#!/bin/bash\necho "$@" >> {tmp_path}/gh.calls\nif [ "$1 $2" = "pr list" ]; then echo "{open_pr}"; fi\n')
    (bin_ / "gh").chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "GITHUB_OUTPUT": str(out), "BASE": "main"}
    subprocess.run(["bash", "-e", "-c", propose_step.pr_script(job(), "requirements.txt")], cwd=repo, env=env, check=True, capture_output=True)
    assert out.read_text() == "proposed=true\n"
    assert _git(remote, "show", "envmatrix/watch-stack-h20:requirements.txt") == "torch==2.13.0+cpu\ntransformers==5.24.0\n"
    calls = (tmp_path / "gh.calls").read_text().splitlines()
    if open_pr:
        assert calls[-1] == "pr edit 7 --body-file reports/watch-summary.md"
    else:
        assert calls[-1].startswith("pr create --head envmatrix/watch-stack-h20 --base main --title envmatrix watch: move requirements.txt")


def test_nothing_proposed_opens_no_pull_request(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {**os.environ, "GITHUB_OUTPUT": str(out)}
    subprocess.run(["bash", "-e", "-c", propose_step.pr_script(job(), "requirements.txt")], cwd=tmp_path, env=env, check=True)
    assert out.read_text() == "proposed=false\n"


def test_slurm_says_where_the_proposed_file_is(tmp_path: Path) -> None:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "fake-python").write_text(
        "#!/bin/bash\nmkdir -p reports/proposed && echo '# summary' > reports/watch-summary.md && echo x > reports/proposed/requirements.txt\n"
    )
    (bin_ / "fake-python").chmod(0o755)
    script = slurm.watch_files(job(), folder=str(tmp_path), cwd=str(tmp_path), python="fake-python")["watch.sh"]
    done = subprocess.run(["bash", "-c", script], env={"PATH": f"{bin_}:{os.environ['PATH']}"}, capture_output=True, text=True, check=False)
    assert "proposed change: reports/proposed/requirements.txt diff: reports/proposed/requirements.txt.diff" in done.stdout


def test_propose_goes_with_schedule_and_is_checked_as_a_job_argument(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "github", "--propose", "requirements.txt"]) == 2
    assert "--propose goes with --schedule" in capsys.readouterr().err
    matrix = str(Path(__file__).resolve().parents[3] / "matrix.yaml")
    args = ["submit", "github", "--file", matrix, "--profile", "cpu", "--gpu", "cpu", "--schedule", "0 6 * * 1", "--dry-run"]
    assert main([*args, "--propose", "req s.txt;rm -rf ~"]) == 2
    assert "--propose" in capsys.readouterr().err
    assert main([*args, "--propose", "requirements.txt"]) == 0
    assert "gh pr create --head envmatrix/watch-cpu-cpu" in capsys.readouterr().out
