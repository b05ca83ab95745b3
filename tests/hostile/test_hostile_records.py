"""Crafted records against `lock`, `report` and the runner: no code runs, nothing lands outside the
output folder, no line is injected into a lock, and a bad record never takes the others down.

Bounds: every case here ends in under 60 s (pip's dry run is the slowest) and never builds a package.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import textwrap
from io import BytesIO
from pathlib import Path

import pytest
from records_factory import make_record

from envmatrix.errors import InputError
from envmatrix.outputs.lock import lock_folder, requirements_lock, write_lock
from envmatrix.outputs.report import write_report
from envmatrix.records.record import BuildFacts, load_records, write_record


def test_lock_folder_stays_inside_out(tmp_path: Path) -> None:
    assert lock_folder(tmp_path, "cpu-torch2.13.0-tf5.23.0-fanone-cpu-py3.11").parent == (tmp_path / "locks").resolve()
    for evil in ("../../etc", "..", "a/../../b", "x\ny", "/abs"):
        with pytest.raises(InputError, match="not an environment id"):
            lock_folder(tmp_path, evil)


def test_record_with_foreign_indexes_needs_explicit_trust(tmp_path: Path) -> None:
    build = BuildFacts(tool="pip", freeze=("six==1.16.0",), index_url="https://evil.example/simple", find_links=("https://evil.example/wheels",))
    records = [make_record("ok", build=build), make_record("zero_grad", scenario="ctl", expect="zero_grad", build=build)]  # vetted: a control reproduced
    with pytest.raises(InputError, match="--trust-record-indexes") as err:
        write_lock(records, tmp_path, env_id=records[0].env)
    assert "evil.example" in str(err.value)
    assert not (tmp_path / "locks").exists()


def _sdist(folder: Path, marker: Path) -> None:
    """A source distribution whose setup.py would write `marker`: building it means running its code."""
    setup = textwrap.dedent(f"""
        from pathlib import Path
        Path({str(marker)!r}).write_text("code ran")
        from setuptools import setup
        setup(name="evilpkg", version="1.0")
    """).encode()
    with tarfile.open(folder / "evilpkg-1.0.tar.gz", "w:gz") as tar:
        for name, data in (("evilpkg-1.0/setup.py", setup), ("evilpkg-1.0/PKG-INFO", b"Metadata-Version: 2.1\nName: evilpkg\nVersion: 1.0\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, BytesIO(data))


def test_lock_never_builds_an_sdist_even_when_trusted(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    marker = tmp_path / "pwned"
    _sdist(wheels, marker)
    build = BuildFacts(tool="pip", freeze=("evilpkg==1.0",), find_links=(str(wheels),))
    records = [make_record("ok", build=build), make_record("zero_grad", scenario="ctl", expect="zero_grad", build=build)]
    with pytest.raises(InputError, match="pip could not look up"):
        write_lock(records, tmp_path / "out", env_id=records[0].env, trust_record_indexes=True)
    assert not marker.exists()


def test_lock_lines_cannot_be_injected() -> None:
    text = requirements_lock([{"name": "six", "version": "1.16.0", "url": "https://x/six.whl", "sha256": "a" * 64}], "cpu-env")
    assert text.count("\n") == 4
    records_env = make_record("ok").to_json()
    records_env["cell"]["env"] = "env\n--index-url http://evil"
    from envmatrix.records.record import Record, RecordError

    with pytest.raises(RecordError):
        Record.from_json(records_env)


def test_report_and_lock_survive_malformed_records(tmp_path: Path) -> None:
    results = tmp_path / "results"
    good = make_record("ok")
    write_record(results / "good.json", good)
    for i, mutation in enumerate(({"outcome": None}, {"cell": None}, {"status": 7}, {"record_version": 99})):
        data = {**good.to_json(), **mutation}
        (results / f"bad{i}.json").write_text(json.dumps(data))
    paths = write_report([results], tmp_path / "out", warn=lambda m: None)
    assert paths["html"].read_text().count('class="cell') == 1
    cmd = [sys.executable, "-m", "envmatrix", "report", "--results", str(results), "--out", str(tmp_path / "out2")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("warning: skipped") == 4 and "Traceback" not in done.stderr
    assert "newer envmatrix" in done.stderr
    assert len(load_records(results)) == 1
