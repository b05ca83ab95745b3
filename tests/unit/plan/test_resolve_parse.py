"""The resolver wrapper's parsing, on real uv output captured into tests/data (uv 0.13.9, 2026-11-23)."""

from __future__ import annotations

from pathlib import Path

from envmatrix.host.pipconfig import PipSettings
from envmatrix.plan import resolve
from envmatrix.plan.cells import Environment
from envmatrix.plan.install import Sources

DATA = Path(__file__).resolve().parents[2] / "data"
CPU = Environment("none", "2.13.0", "4.57.6", "none", "cpu", "3.11")
SETTINGS = PipSettings(None, ("file:///opt/pypi/simple",), ("/opt/wheels",))


def test_parse_pylock_gives_every_file_with_url_and_sha256() -> None:
    files = resolve.parse_pylock((DATA / "uv_compile_cpu.pylock.toml").read_text())
    by_name = {f.name: f for f in files}
    assert len(files) == 28
    torch = by_name["torch"]
    assert torch.version == "2.13.0+cpu" and torch.url.startswith("file:///opt/wheels/torch-2.13.0+cpu-cp311")
    assert by_name["transformers"].version == "4.57.6"
    assert all(len(f.sha256) == 64 and f.url for f in files)
    # where a package has a wheel and an sdist, the wheel is what gets installed
    assert by_name["certifi"].url.endswith(".whl")


def test_no_solution_reason_is_the_resolvers_words_on_one_line() -> None:
    reason = resolve.trim_reason((DATA / "uv_compile_no_solution.stderr").read_text())
    assert reason.startswith("uv: No solution found when resolving dependencies: Because there is no version of transformers==4.99.0")
    assert "\n" not in reason and "error:" not in reason and len(reason) <= resolve.REASON_MAX


def test_long_reasons_are_cut() -> None:
    assert len(resolve.trim_reason("error: No solution found\n  cause: " + "x" * 2000)) == resolve.REASON_MAX


def test_unreachable_index_is_named() -> None:
    stderr = (DATA / "uv_compile_unreachable.stderr").read_text()
    assert resolve.unreachable_index(stderr, ["http://127.0.0.1:9/simple", "https://pypi.org/simple"]) == "http://127.0.0.1:9/simple"
    assert resolve.unreachable_index(stderr, []) == "http://127.0.0.1:9/simple"
    no_solution = (DATA / "uv_compile_no_solution.stderr").read_text()
    assert resolve.unreachable_index(no_solution, ["https://pypi.org/simple"]) is None


def test_requirements_match_the_venv_backend() -> None:
    reqs, flags = resolve.env_flags(CPU, Sources(SETTINGS))
    assert reqs == ["torch==2.13.0+cpu", "transformers==4.57.6", "peft==0.21.2"]
    assert flags[: len(SETTINGS.flags())] == SETTINGS.flags()  # the user's own settings first
    assert flags[len(SETTINGS.flags())] in ("--find-links", "--extra-index-url")  # the local CPU wheel, else PyTorch's CPU index
    cuda = Environment("13.0", "2.14.0", "5.23.0", "none", "B200", "3.12")
    reqs, flags = resolve.env_flags(cuda, Sources(SETTINGS))
    assert reqs[0] == "torch==2.14.0" and flags[-2:] == ["--extra-index-url", "https://download.pytorch.org/whl/cu130"]


def test_compile_command_targets_the_environment() -> None:
    cmd = resolve.compile_command("uv", CPU, SETTINGS.flags())
    assert cmd[:4] == ["uv", "pip", "compile", "-"]
    assert cmd[cmd.index("--python-version") + 1] == "3.11"
    assert cmd[cmd.index("--python-platform") + 1] == resolve.PYTHON_PLATFORM
    assert cmd[cmd.index("--format") + 1] == "pylock.toml"
    assert cmd[cmd.index("--find-links") : cmd.index("--find-links") + 2] == ["--find-links", "/opt/wheels"]
