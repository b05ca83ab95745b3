"""watch --propose: the team's file moved to the newest combination the watch's runs support, every byte outside the
changed pins kept (requirements.txt, pylock.toml, uv.lock), and the proposal said for the pull request's body."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from test_watch import FakeRunner, watched  # noqa: F401  (the fixture: a watch whose runs answer from a table)

from envmatrix.answers.watch import Watch
from envmatrix.answers.watch_propose import plan
from envmatrix.cli import main
from envmatrix.errors import InputError
from envmatrix.plan.cells import Environment
from envmatrix.spec.matrix import Spec
from envmatrix.stack import read_stack
from envmatrix.stack.propose import lock, propose

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REQUIREMENTS = (
    "# our GRPO stack\r\n"
    "--extra-index-url https://download.pytorch.org/whl/cpu\r\n"
    "torch==2.13.0+cpu  # CPU build\r\n"
    "Transformers == 4.51.3 \\\r\n"
    "    --hash=sha256:" + "0" * 64 + "\r\n"
    "trl[vllm]==0.18.2\r\n"
    "accelerate==1.2.1\r\n"
    "datasets>=2\r\n"
)


def test_the_watch_proposes_the_newest_combination_that_trained(tmp_path: Path, watched: tuple[Spec, object, FakeRunner]) -> None:  # noqa: F811
    spec, request, _ = watched
    req = tmp_path / "requirements.txt"
    req.write_bytes(REQUIREMENTS.encode())
    reports = request.reports  # type: ignore[attr-defined]
    summary = tmp_path / "summary.md"
    args = ["watch", "--file", str(spec.path), "--reports", str(reports), "--venvs", str(request.venvs), "--summary", str(summary)]  # type: ignore[attr-defined]
    assert main([*args, "--propose", str(req)]) == 1  # transformers 4.53 broke TRL: exit 1 as before, and a proposal
    proposed = (reports / "proposed" / "requirements.txt").read_bytes().decode()
    assert proposed == REQUIREMENTS.replace("4.51.3", "5.24.0").replace("0.18.2", "1.16.0").replace("1.2.1", "1.15.0")
    diff = (reports / "proposed" / "requirements.txt.diff").read_bytes().decode()
    assert "-Transformers == 4.51.3 \\\r\n+Transformers == 5.24.0 \\\r\n" in diff and "-torch" not in diff
    text = summary.read_text()
    assert "## Proposed change" in text and "- transformers: 4.51.3 → 5.24.0 (all newest together" in text
    assert req.read_bytes().decode() == REQUIREMENTS, "the team's own file is never touched"


def _watch(**kw: object) -> Watch:
    return Watch(profile="p", gpu="cpu", base=Environment("none", "2.13.0", "4.51.3", "none", "cpu", "3.11", (("trl", "0.18.2"),)), scenarios=["s"], **kw)  # type: ignore[arg-type]


def test_the_host_backend_proposes_nothing() -> None:
    p = plan(_watch(listed_only=True))
    assert p.empty and "nothing is proposed" in p.notes[0]


def test_a_range_or_an_included_pin_is_left_and_said(tmp_path: Path) -> None:
    (tmp_path / "base.txt").write_text("torch==2.13.0+cpu\n")
    path = tmp_path / "requirements.txt"
    path.write_text("-r base.txt\ntransformers>=4.50\n")
    done = propose(path, read_stack(path), {"torch": "2.14.0", "transformers": "5.0.0"}, lambda n, v: [])
    assert done.text == path.read_text() and not done.moved
    assert any("base.txt" in x for x in done.left) and any("range" in x for x in done.left)


PYLOCK = """\
lock-version = "1.0"
requires-python = "==3.11.*"
created-by = "envmatrix"

[[packages]]
name = "torch"
version = "2.13.0+cpu"

[[packages.wheels]]
name = "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl"
url = "https://download.pytorch.org/whl/cpu/torch-2.13.0%2Bcpu-cp311-cp311-linux_x86_64.whl"
hashes = {sha256 = "HASH_A"}

[[packages]]
name = "transformers"  # the one to move
version = "4.51.3"
wheels = [{ url = "https://files/transformers-4.51.3-py3-none-any.whl", hashes = { sha256 = "HASH_B" } }]

[tool.envmatrix]
environment = "x"
""".replace("HASH_A", "a" * 64).replace("HASH_B", "b" * 64)

UV_LOCK = (
    """\
version = 1
requires-python = ">=3.11"

[[package]]
name = "transformers"
version = "4.51.3"
source = { registry = "https://pypi.org/simple" }
dependencies = [
    { name = "torch" },
]
sdist = { url = "https://files/transformers-4.51.3.tar.gz", hash = "sha256:HASH_C" }
wheels = [
    { url = "https://files/transformers-4.51.3-py3-none-any.whl", hash = "sha256:HASH_D" },
]

[package.optional-dependencies]
torch = [
    { name = "torch" },
]

[[package]]
name = "torch"
version = "2.13.0"
source = { registry = "https://pypi.org/simple" }
wheels = [
    { url = "https://files/torch-2.13.0-cp311-none-any.whl", hash = "sha256:HASH_E" },
]
""".replace("HASH_C", "c" * 64)
    .replace("HASH_D", "d" * 64)
    .replace("HASH_E", "e" * 64)
)

NEW = [("https://files/transformers-5.24.0-py3-none-any.whl", "f" * 64)]


def test_a_pylock_moves_the_version_and_its_files_and_keeps_every_other_byte(tmp_path: Path) -> None:
    done = lock(tmp_path / "pylock.toml", PYLOCK, {"transformers": "5.24.0"}, lambda n, v: NEW, uv=False)
    assert done.moved == {"transformers": ("4.51.3", "5.24.0")}
    assert done.text.startswith(PYLOCK.split('version = "4.51.3"')[0])  # everything before the moved version, byte for byte
    assert done.text.endswith('\n[tool.envmatrix]\nenvironment = "x"\n')
    data = tomllib.loads(done.text)
    tf = data["packages"][1]
    assert tf["version"] == "5.24.0" and tf["wheels"] == [{"name": "transformers-5.24.0-py3-none-any.whl", "url": NEW[0][0], "hashes": {"sha256": "f" * 64}}]
    assert "4.51.3" not in done.text


def test_a_uv_lock_moves_the_version_and_its_files(tmp_path: Path) -> None:
    done = lock(
        tmp_path / "uv.lock",
        UV_LOCK,
        {"torch": "2.14.0", "transformers": "5.24.0"},
        lambda n, v: [(f"https://files/{n}-{v}-py3-none-any.whl", "f" * 64)],
        uv=True,
    )
    data = tomllib.loads(done.text)
    tf, torch = data["package"]
    assert (tf["version"], torch["version"]) == ("5.24.0", "2.14.0")
    assert "sdist" not in tf and tf["wheels"] == [{"url": "https://files/transformers-5.24.0-py3-none-any.whl", "hash": "sha256:" + "f" * 64}]
    assert tf["optional-dependencies"] == {"torch": [{"name": "torch"}]} and tf["dependencies"] == [{"name": "torch"}]
    assert done.text.replace("5.24.0", "X").count("X") == 2


def test_a_release_without_hashed_files_is_not_moved(tmp_path: Path) -> None:
    done = lock(tmp_path / "pylock.toml", PYLOCK, {"transformers": "5.24.0"}, lambda n, v: [("https://x/t.whl", "not-a-hash")], uv=False)
    assert done.text == PYLOCK and not done.moved and "no files with a sha256" in done.left[0]


def test_an_edit_that_would_touch_another_package_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from envmatrix.stack import propose as module

    monkeypatch.setattr(module, "_files_uv", lambda files: ['[[package]]\nname = "intruder"\nversion = "1"\n'])
    with pytest.raises(InputError, match="would change other entries"):
        lock(tmp_path / "uv.lock", UV_LOCK, {"torch": "2.14.0"}, lambda n, v: NEW, uv=True)


def test_json_says_the_proposal(tmp_path: Path, watched: tuple[Spec, object, FakeRunner], capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    spec, request, _ = watched
    req = tmp_path / "requirements.txt"
    req.write_text("torch==2.13.0+cpu\ntransformers==4.51.3\ntrl==0.18.2\naccelerate==1.2.1\n")
    main(["watch", "--file", str(spec.path), "--reports", str(request.reports), "--venvs", str(request.venvs), "--format", "json", "--propose", str(req)])  # type: ignore[attr-defined]
    data = json.loads(capsys.readouterr().out)
    assert data["proposal"]["moved"]["trl"] == ["0.18.2", "1.16.0"] and data["proposal"]["proposed"].endswith("proposed/requirements.txt")


def test_the_proposal_cannot_become_markup_or_drive_a_terminal() -> None:
    from envmatrix.answers.watch_propose import Move, Plan, markdown

    p = Plan([Move("trl", "0.18.2", "1.16.0", "[click](https://evil.example) <img src=x> @team")], together=True)
    text = markdown(p, "req`s.txt", {"trl": ("0.18.2", "1.16.0")}, ["#12 **b**"], "-trl==0.18.2\n+trl==1.16.0 ``` \x1b[2J\n")
    assert "\\[click\\](" in text and "\\<img" in text and "\\@team" in text and "\\*\\*b" in text  # escaped, so shown as text
    assert "\x1b" not in text and "\n````diff\n" in text and text.rstrip().endswith("````")


def test_a_lock_saved_under_another_name_is_known_by_its_first_lines(tmp_path: Path) -> None:
    path = tmp_path / "team.pylock"
    path.write_text(PYLOCK)
    done = propose(path, read_stack(path), {"transformers": "5.24.0"}, lambda n, v: NEW)
    assert done.moved == {"transformers": ("4.51.3", "5.24.0")} and tomllib.loads(done.text)["packages"][1]["version"] == "5.24.0"
    uv = tmp_path / "uv-py311.lock"
    uv.write_text(UV_LOCK)
    assert propose(uv, read_stack(uv), {"torch": "2.14.0"}, lambda n, v: NEW).moved == {"torch": ("2.13.0", "2.14.0")}
