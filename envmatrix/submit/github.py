"""GitHub Actions: a workflow with one job per (GPU type, shard) on labelled self-hosted runners, then a report job.

Each shard signs its records where they ran: it publishes them as a site (whose test-result.json is the
in-toto Test Result predicate over them) and, where the runner has an OIDC identity, GitHub's attest
action signs every record file keyless (Sigstore); `gh attestation verify` checks a record later.
"""

from __future__ import annotations

from typing import Any

import yaml

from ..share.statement import TEST_RESULT
from . import LONGEST_MINUTES, Fanout, GpuJob, WatchJob, issue_script, propose_step, quote

#: Sets the step output `available` to whether the job can mint an OIDC token (GitHub sets this variable only then).
OIDC_CHECK = (
    'if [ -n "${ACTIONS_ID_TOKEN_REQUEST_URL:-}" ]; then echo "available=true" >> "$GITHUB_OUTPUT"; '
    'else echo "available=false" >> "$GITHUB_OUTPUT"; echo "::notice::no OIDC identity on this runner: its records stay unsigned"; fi'
)


#: Where the shards' tools live: a virtual environment of the job's own (uv makes it, with a uv-managed CPython where
#: the runner has no Python of its own), never the runner's system pip (refused as externally managed on Ubuntu 24.04).
VENV = "$RUNNER_TEMP/envmatrix-venv"
SETUP_UV = "astral-sh/setup-uv@v6"


def install_steps() -> list[dict[str, Any]]:
    """uv, then envmatrix from the checkout into a venv whose bin folder goes on PATH for the later steps."""
    run = "\n".join([f'uv venv "{VENV}"', f'uv pip install --python "{VENV}/bin/python" .', f'echo "{VENV}/bin" >> "$GITHUB_PATH"'])
    return [{"uses": SETUP_UV}, {"name": "install envmatrix in a virtual environment", "run": run}]


def records_key(profile: str) -> str:
    """The cache that carries a profile's records from run to run (its prefix: the newest one is restored)."""
    return f"envmatrix-{profile}-records-"


def restore_step(profile: str, results: str) -> dict[str, Any]:
    """The records the last run left (checkout cleans the ignored reports folder): cells whose record is up to date
    are not run again."""
    return {
        "name": "restore the records of earlier runs",
        "uses": "actions/cache/restore@v4",
        "with": {"path": results, "key": records_key(profile) + "${{ github.run_id }}", "restore-keys": records_key(profile)},
    }


def save_step(profile: str, results: str) -> dict[str, Any]:
    """Keep the records for the next run, whatever this one's outcome (a cache key is written once: run and attempt)."""
    return {
        "name": "keep the records for the next run",
        "if": "always()",
        "uses": "actions/cache/save@v4",
        "with": {"path": results, "key": records_key(profile) + "${{ github.run_id }}-${{ github.run_attempt }}"},
    }


def matrix_include(f: Fanout, job: GpuJob) -> list[dict[str, Any]]:
    """One entry per shard of a GPU type: what an existing workflow's `strategy.matrix.include` can take."""
    n = job.target.shards
    return [{"shard": f"{i}/{n}", "key": f"{job.key}-{i}-of-{n}"} for i in range(1, n + 1)]


def shard_job(f: Fanout, job: GpuJob) -> dict[str, Any]:
    """One GPU type's shards on its labelled runners, at most its throttle at once, each within the time the plan
    gives it. Only the records this run wrote leave the job: the restored ones come back through the cache."""
    # The shard comes from the matrix through the environment; every other argument was checked by fanout().
    run = quote(["envmatrix", *f.run_argv(job, "SHARD")]).replace(" SHARD ", ' "$SHARD" ')
    results = f"{f.reports}/results"
    fresh = f"{f.reports}/fresh"
    site = f"{f.reports}/site"
    collect = "\n".join(
        [
            f"mkdir -p {quote([fresh])} {quote([results])}",
            f'find {quote([results])} -maxdepth 1 -name "*.json" -newer "$RUNNER_TEMP/envmatrix-start" -exec cp {{}} {quote([fresh])}/ \\;',
            f'echo "count=$(find {quote([fresh])} -name "*.json" | wc -l)" >> "$GITHUB_OUTPUT"',
        ]
    )
    return {
        "name": f"{job.gpu} shard ${{{{ matrix.shard }}}}",
        "runs-on": list(job.target.labels),
        "timeout-minutes": min(job.needs.minutes, LONGEST_MINUTES),
        "strategy": {"fail-fast": False, "max-parallel": f.throttle(job), "matrix": {"include": matrix_include(f, job)}},
        "env": {"SHARD": "${{ matrix.shard }}"},
        # id-token mints the OIDC token Sigstore's certificate is issued for; attestations stores the signature.
        "permissions": {"contents": "read", "id-token": "write", "attestations": "write"},
        "steps": [
            {"uses": "actions/checkout@v4"},
            *install_steps(),
            restore_step(f.profile, results),
            {"name": "note the start (records written after it are this run's)", "run": 'touch "$RUNNER_TEMP/envmatrix-start"'},
            {"name": "run this shard", "run": run},
            {"name": "collect the records this run wrote", "id": "fresh", "if": "always()", "run": collect},
            {
                "name": "publish them",
                "id": "publish",
                "if": "always() && steps.fresh.outputs.count != '0'",
                "run": quote(["envmatrix", "publish", "--results", fresh, "--out", site]),
            },
            {"name": "does this runner have an OIDC identity", "id": "oidc", "if": "always()", "run": OIDC_CHECK},
            {
                "name": "sign the records keyless (verify: gh attestation verify RECORD --repo OWNER/REPO --predicate-type " + TEST_RESULT + ")",
                "if": "always() && steps.publish.outcome == 'success' && steps.oidc.outputs.available == 'true'",
                "uses": "actions/attest@v2",
                "with": {"subject-path": f"{site}/records/*.json", "predicate-type": TEST_RESULT, "predicate-path": f"{site}/test-result.json"},
            },
            {
                "name": "upload them",
                "if": "always()",
                "uses": "actions/upload-artifact@v4",
                "with": {"name": "records-${{ matrix.key }}", "path": fresh, "if-no-files-found": "ignore"},
            },
        ],
    }


def workflow(f: Fanout) -> dict[str, Any]:
    """The workflow document: a job per GPU type (they run at once, on disjoint runners), then the report job, which
    lays this run's records over the last run's and keeps the merge for the next. Values reach shell lines only
    through env variables, never `${{ }}` in `run:`."""
    results = f"{f.reports}/results"
    jobs = {f"shard-{job.key}": shard_job(f, job) for job in f.jobs}
    report_job = {
        "needs": list(jobs),
        "if": "always()",
        "runs-on": list(f.scheduler.report_labels),
        "steps": [
            {"uses": "actions/checkout@v4"},
            *install_steps(),
            restore_step(f.profile, results),
            {"uses": "actions/download-artifact@v4", "with": {"pattern": "records-*", "path": results, "merge-multiple": True}},
            {"name": "render the merged report", "run": quote(["envmatrix", "report", "--results", results, "--out", f.reports])},
            {
                "name": "publish the merged site (the records as the shards signed them)",
                "run": quote(["envmatrix", "publish", "--results", results, "--out", f"{f.reports}/site"]),
            },
            save_step(f.profile, results),
            {"uses": "actions/upload-artifact@v4", "with": {"name": "envmatrix-report", "path": f.reports}},
        ],
    }
    return {
        "name": f"envmatrix {f.profile}",
        "on": {"workflow_dispatch": None},
        "permissions": {"contents": "read"},
        "jobs": {**jobs, "report": report_job},
    }


class _Dumper(yaml.SafeDumper):
    """safe_dump, with a shell script of several lines written as a literal block (as a person would write it)."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None)


_Dumper.add_representer(str, _text)


def dump(doc: dict[str, Any]) -> str:
    """YAML text of a workflow: every string quoted as YAML needs, scripts as blocks."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=1000)


def render(f: Fanout) -> str:
    """The workflow as YAML text."""
    return "# Generated by envmatrix submit github; re-generate rather than edit.\n" + dump(workflow(f))


def watch_workflow(job: WatchJob) -> dict[str, Any]:
    """A scheduled `envmatrix watch` on the team's self-hosted runners for one GPU type: the summary into the job
    summary, an issue opened (or commented on) through `gh` with the workflow's token when a release breaks the
    stack, the records kept as an artifact. Values reach shell lines only through env variables or checked arguments."""
    run = "\n".join(
        [
            "set +e",
            quote(["envmatrix", *job.argv()]),
            "status=$?",
            'echo "status=$status" >> "$GITHUB_OUTPUT"',
            f'if [ -f {quote([job.summary])} ]; then cat {quote([job.summary])} >> "$GITHUB_STEP_SUMMARY"; fi',
            'if [ "$status" -ge 2 ]; then exit "$status"; fi',  # bad input (2), no index or environment (3): the job fails
        ]
    )
    steps: list[dict[str, Any]] = [
        {"uses": "actions/checkout@v4"},
        *install_steps(),
        restore_step(f"watch-{job.profile}-{job.gpu.lower()}", f"{job.reports}/results"),
        {"name": "watch the stack's new releases", "id": "watch", "run": run},
        {
            "name": "open or update the regression issue",
            "if": "steps.watch.outputs.status == '1'",
            "env": {"GH_TOKEN": "${{ github.token }}", "GH_REPO": "${{ github.repository }}"},
            "run": issue_script(job),
        },
        {
            "name": "keep the records",
            "if": "always()",
            "uses": "actions/upload-artifact@v4",
            "with": {"name": f"envmatrix-watch-{job.profile}-{job.gpu.lower()}", "path": job.reports, "if-no-files-found": "warn"},
        },
        save_step(f"watch-{job.profile}-{job.gpu.lower()}", f"{job.reports}/results"),
        {"name": "fail on a regression", "if": "steps.watch.outputs.status == '1'", "run": "exit 1"},
    ]
    return propose_step.with_pull_request(job, {
        "name": f"envmatrix watch {job.profile}",
        "on": {"schedule": [{"cron": job.schedule}], "workflow_dispatch": None},
        "permissions": {"contents": "read", "issues": "write"},
        "jobs": {"watch": {"runs-on": list(job.target.labels), "timeout-minutes": 720, "steps": steps}},
    })  # fmt: skip


def render_watch(job: WatchJob) -> str:
    """The watch workflow as YAML text."""
    return "# Generated by envmatrix submit github --schedule; re-generate rather than edit.\n" + dump(watch_workflow(job))
