"""Hostile arguments and outputs: bad --timeout/--jobs/--only, empty selections, outputs that are
files, read-only, /dev/null or full, broken pipes and a closed stdin. Each ends with a clear message
and a distinct status (2 bad input or output, 141 reader gone), never a traceback.

Bounds as in bounded.py: RLIMIT_AS 1 GiB, killed after 30 s, peak RSS under 256 MiB.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from bounded import ROOT, assert_clean_failure, run_bounded
from records_factory import make_record

from envmatrix import jsonio
from envmatrix.errors import OutputError
from envmatrix.outputs.report import write_report
from envmatrix.records.record import write_record

MATRIX = str(ROOT / "matrix.yaml")


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "-inf", "1e400", "abc", ""])
def test_bad_timeout(value: str) -> None:
    ended = run_bounded(["run", "--file", MATRIX, "--profile", "cpu", f"--timeout={value}"])
    assert_clean_failure(ended, says="--timeout")
    assert "seconds" in ended.stderr


@pytest.mark.parametrize("value", ["0", "-1", "100000", "1.5", "x"])
def test_bad_jobs(value: str) -> None:
    assert_clean_failure(run_bounded(["run", "--file", MATRIX, "--profile", "cpu", f"--jobs={value}"]), says="--jobs")


def test_probe_timeout_checked_too() -> None:
    assert_clean_failure(run_bounded(["probe", "--file", MATRIX, "--timeout", "0"]), says="--timeout")


@pytest.mark.parametrize("pattern", ["{a,b}" * 30, "*" * 300, "x\x1b[31m", "a\n"])
def test_hostile_only_pattern(pattern: str) -> None:
    ended = run_bounded(["plan", "--file", MATRIX, "--profile", "cpu", "--only", pattern])
    assert_clean_failure(ended, says="--only")
    assert "\x1b" not in ended.stderr


def test_empty_selection_is_bad_input_for_plan_and_run() -> None:
    """One rule: a selection that matches no cell exits 2, for plan as for run."""
    for command in ("plan", "run"):
        ended = run_bounded([command, "--file", MATRIX, "--profile", "cpu", "--only", "no-such-cell-*"])
        assert_clean_failure(ended, says="matches no cell")


def test_broken_pipe_is_quiet() -> None:
    """`plan --format json | head -1`: the reader goes away; no traceback, status 141 (128 + SIGPIPE)."""
    proc = subprocess.run(
        f"{sys.executable} -m envmatrix plan --file {MATRIX} --profile gpu --format json | head -c 10 >/dev/null; echo ${{PIPESTATUS[0]}} >&2",
        shell=True,  # the pipe is the case under test; every word of the command is ours
        executable="/bin/bash",
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        timeout=60,
    )
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] in ("141", "0"), proc.stderr  # 0 when the output fits the pipe before head exits


def test_stdout_on_a_full_device() -> None:
    with open("/dev/full", "wb") as full:
        ended = run_bounded(["plan", "--file", MATRIX, "--profile", "cpu", "--format", "json"], stdout=full)
    assert_clean_failure(ended, says="No space left on device")
    assert "Exception ignored" not in ended.stderr


CLOSED_STDIN = (
    "import os, subprocess, sys; subprocess.run([sys.executable, '-m', 'envmatrix', 'classify', '-'], stdin=subprocess.DEVNULL, preexec_fn=lambda: os.close(0))"
)


def test_closed_stdin_for_classify() -> None:
    """`classify - <&-`: closed at start (sys.stdin is None) and closed under it (EBADF)."""
    at_start = subprocess.run(
        [sys.executable, "-c", CLOSED_STDIN],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert "Traceback" not in at_start.stderr and "standard input is closed" in at_start.stderr, at_start.stderr
    ended = run_bounded(["-c", "import os, sys; os.close(0); sys.argv = ['envmatrix', 'classify', '-']; from envmatrix.cli import main; sys.exit(main())"])
    assert_clean_failure(ended, says="standard input: cannot read the log")


def _results(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    results.mkdir()
    write_record(results / "a.json", make_record("ok"))
    return results


@pytest.mark.parametrize("kind", ["file", "dev-null", "read-only", "under-a-file"])
def test_report_out_that_cannot_be_written(tmp_path: Path, kind: str) -> None:
    results = _results(tmp_path)
    out = {"file": tmp_path / "afile", "dev-null": Path("/dev/null"), "read-only": tmp_path / "ro", "under-a-file": tmp_path / "afile" / "sub"}[kind]
    (tmp_path / "afile").write_text("x")
    if kind == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into a read-only folder")
        out.mkdir()
        out.chmod(0o555)
    ended = run_bounded(["report", "--results", str(results), "--out", str(out)])
    assert_clean_failure(ended)
    assert str(out) in ended.stderr or "/dev/null" in ended.stderr


def test_failed_write_keeps_the_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk that fills while a file is written: the old file stays whole, no temporary is left."""
    target = tmp_path / "results.csv"
    target.write_text("the good one\n")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jsonio.os, "fsync", full)
    with pytest.raises(OutputError, match="No space left on device"):
        jsonio.write_text_atomic(target, "a torn one")
    assert target.read_text() == "the good one\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]


def test_full_tmpfs_keeps_the_previous_report(tmp_path: Path) -> None:
    """On a real 1 MiB tmpfs (where mounting one is allowed): re-rendering onto a full disk fails
    with OutputError and leaves the earlier results.csv, results.json and matrix.html intact."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if shutil.which("mount") is None or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here; test_failed_write_keeps_the_previous_file injects the error instead")
    try:
        results = _results(tmp_path)
        write_report([results], mnt)
        before = {p.name: p.read_bytes() for p in mnt.iterdir()}
        with open(mnt / "filler", "wb") as fh, pytest.raises(OSError):
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        with pytest.raises(OutputError):
            write_report([results], mnt)
        after = {p.name: p.read_bytes() for p in mnt.iterdir() if p.name != "filler"}
        assert after == before
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


@pytest.mark.parametrize(("statuses", "expected"), [(["build_failed", "build_failed", "skipped"], 3), (["build_failed", "done"], 0), (["skipped"], 0)])
def test_run_exit_status_when_every_build_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, statuses: list[str], expected: int) -> None:
    """README: 3 when no environment could be prepared. Decided from the records the runner returns
    (the runner itself is faked here: what is tested is the command's mapping to an exit status)."""
    from envmatrix import cli
    from envmatrix.cli import run as run_command
    from envmatrix.run.runner import RunReport

    records = []
    for i, status in enumerate(statuses):
        rec = make_record("build_failed" if status == "build_failed" else "ok" if status == "done" else "skipped", scenario=f"s{i}")
        records.append(dataclasses.replace(rec, status=status))

    class FakeRunner:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def run(self, cells: object) -> RunReport:
            for rec in records:
                write_record(tmp_path / "reports" / "results" / f"{rec.id.replace('/', '__')}.json", rec)
            return RunReport(records=records, ran=len(records))

    monkeypatch.setattr(run_command, "Runner", FakeRunner)
    code = cli.main(["run", "--file", MATRIX, "--profile", "cpu", "--backend", "host", "--gpu", "cpu", "--reports", str(tmp_path / "reports")])
    assert code == expected
