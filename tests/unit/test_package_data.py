"""Every data file the package reads ships in its wheel: a file under envmatrix/ that is not Python is listed in
pyproject's package-data (a plain `pip install .` lacked the name index once, and only a slow integration test saw it)."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def test_every_data_file_of_the_package_is_in_its_package_data() -> None:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    shipped = [f"{package.replace('.', '/')}/{glob}" for package, globs in data.items() for glob in globs]
    files = [p.relative_to(ROOT).as_posix() for p in (ROOT / "envmatrix").rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")]
    assert files, "no data files found: the test would prove nothing"
    missing = [f for f in files if not any(fnmatch.fnmatch(f, pattern) for pattern in shipped)]
    assert not missing, f"not in pyproject.toml's [tool.setuptools.package-data]: {missing}"
