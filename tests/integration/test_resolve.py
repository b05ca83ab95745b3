"""Real resolver calls: PyPI and this machine's local indexes answer; port 9 on localhost does not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envmatrix.cli import main

pytestmark = pytest.mark.integration


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh resolver cache, so each test asks the real indexes."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "envmatrix" / "resolve"


def cpu_only(transformers: list[str]) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        data["profiles"]["cpu"]["transformers"] = transformers
        data["profiles"]["cpu"]["scenarios"] = ["fp32-sdpa", "ctl-zero-grad"]

    return edit


def test_cpu_profile_resolves_and_shows_files_then_is_cached(matrix: Any, cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = matrix(cpu_only(["4.57.6"]))
    assert main(["plan", "--file", str(path), "--profile", "cpu", "--resolve"]) == 0
    out = capsys.readouterr().out
    assert "cpu-torch2.13.0-tf4.57.6-fanone-py3.11 resolves" in out and "(cached)" not in out
    assert "torch==2.13.0+cpu" in out and "transformers==4.57.6" in out and "sha256:" in out
    assert len(list(cache.glob("*.json"))) == 1
    assert main(["plan", "--file", str(path), "--profile", "cpu", "--resolve"]) == 0
    assert "resolves (cached)" in capsys.readouterr().out


def test_release_that_does_not_exist_skips_cells_with_the_resolvers_reason(matrix: Any, cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = matrix(cpu_only(["4.99.0", "4.57.6"]))
    assert main(["plan", "--file", str(path), "--profile", "cpu", "--resolve", "--format", "json"]) == 0
    import json

    plan = json.loads(capsys.readouterr().out)
    bad = [c for c in plan["cells"] if c["transformers"] == "4.99.0"]
    good = [c for c in plan["cells"] if c["transformers"] == "4.57.6"]
    assert bad and all(c["status"] == "skipped" and "no version of transformers==4.99.0" in c["reason"] for c in bad)
    assert all(c["status"] == "planned" for c in good)
    assert plan["unreachable"] == {}


def test_unreachable_index_exits_3_naming_it_and_writes_nothing(
    matrix: Any, cache: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", "http://127.0.0.1:9/simple")
    path = matrix(cpu_only(["4.57.6"]))
    assert main(["plan", "--file", str(path), "--profile", "cpu", "--resolve"]) == 3
    err = capsys.readouterr().err
    assert "could not reach package index http://127.0.0.1:9/simple" in err and "Traceback" not in err
    assert not cache.exists() or not list(cache.iterdir())


def test_run_checks_before_building(matrix: Any, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`run` resolves first: a release that does not exist is recorded skipped with uv's reason, and no venv is made."""
    import json

    path = matrix(cpu_only(["4.99.0"]))
    venvs, reports = tmp_path / "venvs", tmp_path / "r"
    args = ["run", "--file", str(path), "--profile", "cpu", "--gpu", "cpu", "--backend", "venv", "--venvs", str(venvs), "--reports", str(reports)]
    assert main(args) == 0
    recs = [json.loads(p.read_text()) for p in (reports / "results").rglob("*.json")]
    assert len(recs) == 2 and all(r["status"] == "skipped" for r in recs)
    assert all("no version of transformers==4.99.0" in json.dumps(r) for r in recs)
    assert not venvs.exists() or not any(venvs.glob("cpu-*"))
