"""THE owner of where caches live (probes/caches.py): every cache variable under the folder the caller owns,
read by the probe, the fork helper and every backend; none under the user's home."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envmatrix.backends.host import HostBackend
from envmatrix.backends.venv import VenvBackend, _cell_env
from envmatrix.plan.builds import Build
from envmatrix.plan.cells import Environment
from probes import caches, grpo_smoke

HOME_DEFAULTS = ("HF_HOME", "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "XDG_CACHE_HOME", "HOME")


def under(values: dict[str, str], root: Path) -> None:
    for name in caches.FOLDERS:
        assert Path(values[name]).is_relative_to(root), (name, values[name])


def test_every_cache_variable_is_under_the_root_and_the_user_site_is_not_read(tmp_path: Path) -> None:
    values = caches.variables(tmp_path)
    under(values, tmp_path)
    assert set(HOME_DEFAULTS) <= set(values)
    assert values["PYTHONNOUSERSITE"] == "1" and values["VLLM_NO_USAGE_STATS"] == "1"
    assert caches.variables(tmp_path, home="/home/probe")["HOME"] == "/home/probe"


def test_apply_keeps_what_the_caller_set_unless_told_and_makes_home(tmp_path: Path) -> None:
    env = {"HF_HOME": "/env/hf"}
    done = caches.apply(caches.variables(tmp_path), env)
    assert env["HF_HOME"] == "/env/hf" and "HF_HOME" not in done and Path(env["HOME"]).is_dir()
    caches.apply(caches.cell_variables(tmp_path / "cell"), env, keep=False)
    assert env["HF_HOME"] == str(tmp_path / "cell" / ".hf")


def test_a_probe_run_alone_keeps_every_cache_in_its_output_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*caches.FOLDERS, *caches.FIXED):
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "out"
    grpo_smoke.start(grpo_smoke.build_parser().parse_args(["--out", str(out)]))
    under(dict(os.environ), out)
    assert os.environ["HF_HOME"] == str(out / caches.CELL_HF)  # the cell's own hub folder (remote code)


def test_the_venv_backends_cells_keep_their_caches_in_the_environments_folder(tmp_path: Path) -> None:
    env = _cell_env(tmp_path / "venv")
    under(env, tmp_path / "venv")


def test_the_host_backend_keeps_caches_in_a_folder_of_its_run_and_removes_it(tmp_path: Path) -> None:
    env = Environment("none", "2.13.0", "4.57.6", "none", "cpu", "3.11")
    build = Build(env.build_id, env, ())
    with HostBackend() as backend:
        ready = backend.prepare(build, tmp_path / "build.log")
        root = Path(ready.env["HOME"]).parent
        under(ready.env, root)
        assert not root.is_relative_to(Path.home())
    assert not root.exists()


def test_the_venv_backends_cells_write_the_bytecode_the_install_left_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiling every file at install cost 19 s an environment; the cells compile what they import, once, into the
    environment's folder, which a user's PYTHONDONTWRITEBYTECODE must not stop (each import would compile again)."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    assert "PYTHONDONTWRITEBYTECODE" not in _cell_env(tmp_path / "venv")
    backend = VenvBackend(tmp_path / "venvs")
    pip = backend._pip(tmp_path / "venv" / "bin" / "python")
    assert "--compile-bytecode" not in pip and (backend.uv or "--no-compile" in pip)
