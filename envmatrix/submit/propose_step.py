"""The scheduled watch's change a team can merge (`submit github|slurm --schedule … --propose FILE`).

`envmatrix watch --propose FILE` writes FILE moved to the newest releases that train to REPORTS/proposed/ beside the
summary (answers/watch_propose.py). On GitHub a step then opens a pull request with that change, or updates the open
one on the same branch, with the summary as its body (evidence, first bad releases, the lock it stands on); the
regression issue is opened only where nothing could be proposed. On Slurm the script says where the proposed file is.

Every value in the shell lines is quoted (shlex) or comes through an env variable; the file and the reports folder are
checked as job arguments (submit._safe_argument) before they get here.
"""

from __future__ import annotations

import copy
from pathlib import PurePosixPath
from typing import Any

from . import WatchJob, quote

#: Who commits the proposal: GitHub's own Actions bot identity (its documented noreply address).
BOT = ("github-actions[bot]", "41898282+github-actions[bot]@users.noreply.github.com")
#: The id of the step, read by the issue step's condition.
STEP_ID = "propose"


def proposed_file(job: WatchJob) -> str | None:
    """The team's file the scheduled watch proposes to move (its --propose), or None."""
    args = list(job.watch_args)
    return args[args.index("--propose") + 1] if "--propose" in args[:-1] else None


def proposed_path(job: WatchJob, file: str) -> str:
    """Where watch writes the proposal: REPORTS/proposed/<the file's name>, beside the summary."""
    return f"{job.reports}/proposed/{PurePosixPath(file).name}"


def branch(job: WatchJob) -> str:
    return f"envmatrix/watch-{job.profile}-{job.gpu.lower()}"


def title(job: WatchJob, file: str) -> str:
    return f"envmatrix watch: move {file} to the newest releases that train on {job.gpu}"


def pr_script(job: WatchJob, file: str) -> str:
    """Commit the proposed file on the watch's branch, push it, then open the pull request or update the open one's body;
    `proposed=true|false` goes to the step's outputs."""
    proposed, head = quote([proposed_path(job, file)]), quote([branch(job)])
    return "\n".join(
        [
            f"if [ ! -f {proposed} ] || cmp -s {proposed} {quote([file])}; then",
            '  echo "proposed=false" >> "$GITHUB_OUTPUT"; exit 0',
            "fi",
            f"git config user.name {quote([BOT[0]])}",
            f"git config user.email {quote([BOT[1]])}",
            f"git checkout -B {head}",
            f"cp {proposed} {quote([file])}",
            f"git add {quote([file])}",
            f"git commit -m {quote([title(job, file)])}",
            f"git push --force origin {head}",
            f"number=$(gh pr list --head {head} --state open --json number --jq '.[0].number')",
            f'if [ -n "$number" ]; then gh pr edit "$number" --body-file {quote([job.summary])};',
            f'else gh pr create --head {head} --base "$BASE" --title {quote([title(job, file)])} --body-file {quote([job.summary])}; fi',
            'echo "proposed=true" >> "$GITHUB_OUTPUT"',
        ]
    )


def pr_step(job: WatchJob, file: str) -> dict[str, Any]:
    """The workflow step: after the watch, whatever it found (a new release that trains is worth a change too)."""
    return {
        "name": "open or update the pull request with the proposed change",
        "id": STEP_ID,
        "if": "steps.watch.outputs.status == '0' || steps.watch.outputs.status == '1'",
        "env": {"GH_TOKEN": "${{ github.token }}", "GH_REPO": "${{ github.repository }}", "BASE": "${{ github.ref_name }}"},
        "run": pr_script(job, file),
    }


def with_pull_request(job: WatchJob, workflow: dict[str, Any]) -> dict[str, Any]:
    """The scheduled watch's workflow with the pull-request step before the issue step, the issue kept for when nothing
    could be proposed, and the permissions a push and a pull request need; unchanged without --propose."""
    file = proposed_file(job)
    if file is None:
        return workflow
    doc = copy.deepcopy(workflow)
    doc["permissions"] = {**doc.get("permissions", {}), "contents": "write", "pull-requests": "write"}
    steps: list[dict[str, Any]] = doc["jobs"]["watch"]["steps"]
    at = next((i for i, s in enumerate(steps) if "issue" in str(s.get("name", ""))), None)
    if at is None:
        at = next(i for i, s in enumerate(steps) if s.get("id") == "watch") + 1
    else:
        steps[at]["if"] = f"steps.watch.outputs.status == '1' && steps.{STEP_ID}.outputs.proposed != 'true'"
    steps.insert(at, pr_step(job, file))
    return doc


def slurm_lines(job: WatchJob) -> list[str]:
    """Lines for Slurm's watch.sh: where the proposed file and its diff are (watch wrote them beside the summary)."""
    file = proposed_file(job)
    if file is None:
        return []
    proposed = quote([proposed_path(job, file)])
    return [f"if [ -f {proposed} ]; then echo 'proposed change:' {proposed} 'diff:' {quote([proposed_path(job, file) + '.diff'])}; fi"]
