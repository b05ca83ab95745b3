"""A lock keeps flash-attn: its freeze line is a local file pip cannot look up, so the lock names the wheel's own
URL and the sha256 of the file installed (the build facts both backends record)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envmatrix.outputs.lock import flash_entry, pylock_toml, requirements_lock
from envmatrix.records.record import BuildFacts

SHA = "b" * 64
WHEEL = "flash_attn-2.8.3+cu12torch2.8cxx11abiTRUE-cp312-cp312-linux_x86_64.whl"
URL = f"https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/{WHEEL}"


def test_a_released_wheel_is_locked_by_its_url_and_hash() -> None:
    build = BuildFacts(
        tool="docker", freeze=(f"flash-attn @ file:///tmp/fa/{WHEEL}",), flash_attn={"file": WHEEL, "sha256": SHA, "source": "releases", "origin": URL}
    )
    entry = flash_entry(build)
    assert entry == {"name": "flash-attn", "version": "2.8.3+cu12torch2.8cxx11abiTRUE", "url": URL, "sha256": SHA, "direct": "yes"}
    text = requirements_lock([entry], "env")
    assert f"flash-attn @ {URL} \\\n    --hash=sha256:{SHA}" in text
    assert f'url = "{URL}"' in pylock_toml([entry], "3.12")


def test_no_entry_without_a_fetched_wheel() -> None:
    assert flash_entry(BuildFacts()) is None
    built = {"file": "flash-attn-2.8.3 (sdist, built here)", "sha256": "", "source": "sdist", "origin": "https://pypi.org/project/flash-attn/2.8.3/"}
    assert flash_entry(BuildFacts(flash_attn=built)) is None
    local = {"file": WHEEL, "sha256": SHA, "source": "wheelhouse", "origin": f"/srv/wheels/{WHEEL}"}
    assert flash_entry(BuildFacts(flash_attn=local)) is None


def test_a_release_published_only_as_an_sdist_is_locked_by_its_index_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSpeed has no wheels: pip (wheels only: it never builds an sdist to answer) finds none, so its sdist's URL and
    sha256 come from the index's JSON page; the wheels are pip's."""
    import subprocess
    from types import SimpleNamespace

    from envmatrix.outputs import lock
    from envmatrix.records.record import BuildFacts

    asked: list[list[str]] = []

    def fake_pip(args: list[str], **kw: object) -> SimpleNamespace:
        pins = Path(args[-1]).read_text().split()
        asked.append(pins)
        if any(p.startswith("deepspeed==") for p in pins):
            return SimpleNamespace(returncode=1, stderr="ERROR: No matching distribution found for deepspeed==0.18.4\n")
        wheel = {
            "metadata": {"name": "torch", "version": "2.13.0"},
            "download_info": {"url": "https://x.example/torch-2.13.0.whl", "archive_info": {"hashes": {"sha256": "a" * 64}}},
        }
        Path(args[args.index("--report") + 1]).write_text(json.dumps({"install": [wheel]}))
        return SimpleNamespace(returncode=0, stderr="")

    monkeypatch.setattr(subprocess, "run", fake_pip)
    monkeypatch.setattr(lock.pkgconstraints, "sdist_url", lambda name, version, index: (f"https://x.example/{name}-{version}.tar.gz", "b" * 64))
    entries = lock.pip_report(["torch==2.13.0", "deepspeed==0.18.4"], BuildFacts())
    assert [(e["name"], e["url"].rsplit("/", 1)[-1]) for e in entries] == [("deepspeed", "deepspeed-0.18.4.tar.gz"), ("torch", "torch-2.13.0.whl")]
    assert asked == [["torch==2.13.0", "deepspeed==0.18.4"], ["torch==2.13.0"]]
