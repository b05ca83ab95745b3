"""pip's settings (config files and PIP_* variables) and where the pinned CPU torch comes from.

Standard library only: the noxfile imports it before envmatrix's dependencies exist. uv does not
read pip's configuration, so mirrors and wheelhouses set for pip are handed to uv explicitly.
"""

from __future__ import annotations

import configparser
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

TORCH_INDEX = "https://download.pytorch.org/whl"
#: A mirror of PyTorch's wheel indexes (same layout: `<mirror>/cu128`), for hosts that cannot reach download.pytorch.org.
TORCH_INDEX_VARIABLE = "ENVMATRIX_TORCH_INDEX"


def torch_index_url(build_tag: str, environ: dict[str, str] | None = None) -> str:
    """PyTorch's wheel index for a build: `cpu`, `cu124`, ... (versions there carry the tag: 2.6.0+cu124), or the same
    folder of the mirror ENVMATRIX_TORCH_INDEX names."""
    env = os.environ if environ is None else environ
    root = env.get(TORCH_INDEX_VARIABLE, "").strip().rstrip("/") or TORCH_INDEX
    return f"{root}/{build_tag}"


@dataclass(frozen=True)
class PipSettings:
    """The index settings pip would use: environment variables override config files."""

    index_url: str | None
    extra_index_urls: tuple[str, ...]
    find_links: tuple[str, ...]

    def flags(self) -> list[str]:
        """These settings as pip/uv flags: uv does not read pip's configuration, so it is handed them."""
        flags = ["--index-url", self.index_url] if self.index_url else []
        for url in self.extra_index_urls:
            flags += ["--extra-index-url", url]
        for link in self.find_links:
            flags += ["--find-links", link]
        return flags


def _config_files() -> list[Path]:
    home = Path.home()
    files = [Path("/etc/pip.conf"), Path(os.environ.get("XDG_CONFIG_HOME", home / ".config")) / "pip" / "pip.conf", home / ".pip" / "pip.conf"]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    return files


def read_pip_settings(environ: dict[str, str] | None = None, files: list[Path] | None = None) -> PipSettings:
    """Merge pip.conf files (later wins) under PIP_INDEX_URL / PIP_EXTRA_INDEX_URL / PIP_FIND_LINKS."""
    env = dict(os.environ) if environ is None else environ
    values: dict[str, str] = {}
    for path in _config_files() if files is None else files:
        parser = configparser.ConfigParser()
        try:
            parser.read(path)
        except configparser.Error:
            continue
        for section in ("global", "install"):
            if parser.has_section(section):
                values.update({k: v for k, v in parser.items(section) if k in ("index-url", "extra-index-url", "find-links")})
    for key in ("index-url", "extra-index-url", "find-links"):
        var = "PIP_" + key.upper().replace("-", "_")
        if env.get(var):
            values[key] = env[var]
    return PipSettings(
        index_url=values.get("index-url"),
        extra_index_urls=tuple(values.get("extra-index-url", "").split()),
        find_links=tuple(values.get("find-links", "").split()),
    )


def local_torch_wheel(version: str, find_links: tuple[str, ...]) -> str | None:
    """A find-links folder holding the CPU wheel of this torch, or None."""
    for link in find_links:
        folder = Path(link.removeprefix("file://"))
        if folder.is_dir() and any(folder.glob(f"torch-{version}+cpu-*.whl")):
            return str(folder)
    return None


def cpu_torch_install_args(version: str, settings: PipSettings | None = None) -> list[str]:
    """Requirement and source flags for an exact CPU torch: the local wheel where pip's settings
    provide it, else the PyTorch CPU index. Never a bare `torch`, which would pull a CUDA build."""
    settings = settings or read_pip_settings()
    folder = local_torch_wheel(version, settings.find_links)
    source = ["--find-links", folder] if folder else ["--extra-index-url", torch_index_url("cpu")]
    return [f"torch=={version}+cpu", *source]


def find_uv() -> str | None:
    """The uv binary: on PATH, beside this interpreter, or where the `uv` package (a dependency) put it."""
    found = shutil.which("uv") or shutil.which("uv", path=str(Path(sys.executable).parent))
    if found:
        return found
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return None
