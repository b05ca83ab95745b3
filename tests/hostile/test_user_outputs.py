"""Outputs a user names (issue 42, mechanism 2): the one writer (envmatrix/outputs/writer.py) never destroys what
it replaces. A symlink's target is written and the link stays; a device, FIFO or folder where a file is expected
is refused with exit 2 and left alone; a folder envmatrix did not write is never emptied; init keeps every byte
outside its profile (comments after it, CRLF, a 0600 mode); an answer is printed before its file is written."""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path

import pytest
from bounded import assert_clean_failure, run_bounded
from records_factory import make_record

from envmatrix.cli import main
from envmatrix.errors import OutputError
from envmatrix.outputs.writer import MARKER, file_target, write_file, write_files
from envmatrix.records.record import cell_stem, write_record
from envmatrix.share.publish import publish

REQS = "torch==2.13.0\ntransformers==4.57.6\ntrl==0.18.2\naccelerate==1.2.1\n"


def results(tmp_path: Path) -> Path:
    rec = make_record("ok", gpu="cpu", cuda="none")
    write_record(tmp_path / "results" / f"{cell_stem(rec.id)}.json", rec)
    return tmp_path / "results"


# ---- the writer itself ---------------------------------------------------------------------------------


def test_a_regular_file_is_replaced_keeping_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "out.md"
    target.write_text("old")
    target.chmod(0o600)
    write_file(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["out.md"], "no temporary file left behind"


def test_a_new_file_gets_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        write_file(tmp_path / "new.md", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.md").stat().st_mode) == 0o640


def test_a_symlink_is_followed_and_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "real" / "summary.md"
    real.parent.mkdir()
    real.write_text("old")
    real.chmod(0o640)
    link = tmp_path / "summary.md"
    link.symlink_to(real)
    assert write_file(link, "new") == real
    assert link.is_symlink() and real.read_text() == "new" and stat.S_IMODE(real.stat().st_mode) == 0o640


@pytest.mark.parametrize("kind", ["folder", "fifo", "device", "link-to-device"])
def test_a_folder_fifo_or_device_is_refused_and_left_alone(tmp_path: Path, kind: str) -> None:
    target = tmp_path / "x"
    if kind == "folder":
        target.mkdir()
        (target / "thesis.tex").write_text("years of work")
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "device":
        target = Path("/dev/null")
    else:
        target.symlink_to("/dev/null")
    before = os.lstat(target)
    with pytest.raises(OutputError, match="not a file"):
        write_file(target, "x")
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    if kind == "folder":
        assert (target / "thesis.tex").read_text() == "years of work"


def test_several_files_are_all_checked_before_any_is_written(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("old a")
    (tmp_path / "b.json").mkdir()
    with pytest.raises(OutputError):
        write_files([(tmp_path / "a.csv", "new a"), (tmp_path / "b.json", "b")])
    assert (tmp_path / "a.csv").read_text() == "old a"


# ---- the commands --------------------------------------------------------------------------------------


def test_watch_summary_on_a_device_is_refused_before_the_watch_runs() -> None:
    ended = run_bounded(["watch", "--summary", "/dev/null", "--file", "/nonexistent.yaml"])
    assert_clean_failure(ended, 2, says="/dev/null: a device, not a file")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_publish_never_empties_a_folder_it_did_not_write(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.json").write_text('{"site_version": 1, "records": []}')
    (docs / "thesis.tex").write_text("years of work")
    ended = run_bounded(["publish", "--results", str(results(tmp_path)), "--out", str(docs)])
    assert_clean_failure(ended, 2, says="a folder envmatrix did not write")
    assert (docs / "thesis.tex").read_text() == "years of work"


def test_publish_replaces_its_own_site_and_writes_through_a_link(tmp_path: Path) -> None:
    folder = results(tmp_path)
    real = tmp_path / "served" / "site"
    real.parent.mkdir()
    link = tmp_path / "site"
    link.symlink_to(real, target_is_directory=True)
    publish([folder], link, None, print)
    assert link.is_symlink() and (real / MARKER).is_file() and (real / "index.json").is_file()
    (real / "stale.json").write_text("{}")
    publish([folder], link, None, print)
    assert link.is_symlink() and not (real / "stale.json").exists(), "its own earlier site is replaced whole"


def test_report_refuses_a_fifo_where_its_csv_goes_and_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    out.mkdir()
    os.mkfifo(out / "results.csv")
    assert main(["report", "--results", str(results(tmp_path)), "--out", str(out)]) == 2
    assert stat.S_ISFIFO(os.lstat(out / "results.csv").st_mode) and not (out / "matrix.html").exists()


def test_init_keeps_comments_line_endings_mode_and_bom(tmp_path: Path) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text(REQS)
    target = tmp_path / "m.yaml"
    assert main(["init", "--from", str(req), "--file", str(target), "--gpu", "cpu"]) == 0
    text = target.read_text()
    # the user's own comment after the profile, CRLF endings, a private mode
    text = text.replace("\nscenarios:\n", "\n# keep me: the team's note about the next section\nscenarios:\n", 1)
    target.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    target.chmod(0o600)
    req.write_text(REQS.replace("4.57.6", "4.51.3"))
    assert main(["init", "--from", str(req), "--file", str(target), "--gpu", "cpu"]) == 0
    raw = target.read_bytes()
    assert b"# keep me: the team's note about the next section\r\n" in raw
    assert raw.count(b"\n") == raw.count(b"\r\n"), "every line keeps its CRLF"
    assert b"4.51.3" in raw and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert raw.startswith(b"\xef\xbb\xbf") and raw.count(b"\xef\xbb\xbf") == 1, "the byte-order mark is kept, once"


@pytest.mark.parametrize("profile", ["'q'", "Bad Name", "x" * 200, "a\x1b]0;t\x07"])
def test_init_checks_the_profile_name_before_writing(tmp_path: Path, profile: str) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text(REQS)
    ended = run_bounded(["init", "--from", str(req), "--file", str(tmp_path / "m.yaml"), "--gpu", "cpu", "--profile", profile])
    assert_clean_failure(ended, 2, says="--profile: profile name")
    assert "\x1b" not in ended.stderr and ".yaml" not in ended.stderr.replace("m.yaml", ""), "no temporary file is named"
    assert not (tmp_path / "m.yaml").exists()


def test_init_prints_its_answer_before_a_failed_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    req = tmp_path / "requirements.txt"
    req.write_text(REQS)

    def full_disk(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(os, "replace", full_disk)
    assert main(["init", "--from", str(req), "--file", str(tmp_path / "m.yaml"), "--gpu", "cpu"]) == 2
    said = capsys.readouterr()
    assert "profile stack" in said.out and "transformers: 4.57.6" in said.out, "the answer is out"
    assert "cannot write" in said.err and not (tmp_path / "m.yaml").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["requirements.txt"], "no temporary file left behind"


def test_file_target_names_a_link_to_a_folder(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "l").symlink_to(tmp_path / "d")
    with pytest.raises(OutputError, match="a link to"):
        file_target(tmp_path / "l")


if sys.platform != "linux":  # pragma: no cover
    pytestmark = pytest.mark.skip("POSIX file types")
