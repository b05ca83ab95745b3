"""A vetted environment → a lockfile of what actually ran: hashed requirements, PEP 751 pylock.toml,
the index settings used (and, for docker environments, the image).

Versions come from the freeze taken inside the environment, never from a fresh resolution; pip only
looks up the URL and sha256 of each exact pinned file (`pip install --dry-run --report`).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .errors import InputError
from .jsonio import write_json_atomic, write_text_atomic
from .vetting import best, vetted_environments


def select_environment(records: list[dict[str, Any]], env_id: str | None, best_gpu: str | None) -> dict[str, Any]:
    """The vetted environment named, or the newest vetted one for a GPU type; a clear error otherwise."""
    vetted = vetted_environments(records)
    if best_gpu:
        choice = best(vetted, best_gpu)
        if choice is None:
            raise InputError(f"--best {best_gpu}: no vetted environment for {best_gpu} in the records; run the matrix there first (nox -s matrix)")
        return choice
    for v in vetted:
        if v["env"] == env_id:
            return v
    known = {r["cell"]["env"] for r in records}
    if env_id not in known:
        raise InputError(f"{env_id}: no records for this environment; environments with records: {', '.join(sorted(known)) or 'none'}")
    raise InputError(
        f"{env_id} is not vetted (a healthy scenario failed or a control did not reproduce); vetted: {', '.join(v['env'] for v in vetted) or 'none'}"
    )


def _freeze_and_build(records: list[dict[str, Any]], env_id: str) -> tuple[list[str], dict[str, Any]]:
    for rec in records:
        if rec["cell"]["env"] == env_id and rec.get("status") == "done":
            build = (rec.get("environment") or {}).get("build") or {}
            freeze = build.get("freeze")
            if freeze:
                return [line for line in freeze if "==" in line and not line.startswith("-e ")], build
    raise InputError(f"{env_id}: its records hold no freeze of the environment (the host backend does not take one); run it with the venv or docker backend")


def pip_report(pins: list[str], build: dict[str, Any]) -> list[dict[str, Any]]:
    """URL and sha256 of each pinned distribution, from the same indexes the environment used."""
    if importlib.util.find_spec("pip") is None:
        raise InputError(f"looking up the pinned files' hashes needs pip in {sys.executable}; install it (python -m ensurepip, or uv pip install pip)")
    args = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps", "--quiet", "--disable-pip-version-check"]
    if build.get("index_url"):
        args += ["--index-url", str(build["index_url"])]
    for url in build.get("extra_index_urls") or []:
        args += ["--extra-index-url", str(url)]
    for link in build.get("find_links") or []:
        args += ["--find-links", str(link)]
    with tempfile.TemporaryDirectory() as tmp:
        reqs = Path(tmp) / "pins.txt"
        reqs.write_text("\n".join(pins) + "\n")
        report = Path(tmp) / "report.json"
        proc = subprocess.run([*args, "--report", str(report), "-r", str(reqs)], capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise InputError(f"pip could not look up the pinned files: {proc.stderr.strip()[-800:]}")
        data = json.loads(report.read_text())
    entries = []
    for item in data["install"]:
        info = item["download_info"]
        sha = ((info.get("archive_info") or {}).get("hashes") or {}).get("sha256")
        if not sha:
            raise InputError(f"{item['metadata']['name']}: pip reported no sha256 for {info.get('url')}")
        entries.append({"name": item["metadata"]["name"], "version": item["metadata"]["version"], "url": info["url"], "sha256": sha})
    return sorted(entries, key=lambda e: e["name"].lower())


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def requirements_lock(entries: list[dict[str, Any]], env_id: str) -> str:
    """`name==version --hash=sha256:…` for every package: `pip install --require-hashes -r` installs it."""
    lines = [f"# envmatrix lock for {env_id}: the environment that ran, frozen inside it", "# install: pip install --require-hashes -r requirements.lock"]
    for e in entries:
        lines.append(f"{e['name']}=={e['version']} \\\n    --hash=sha256:{e['sha256']}")
    return "\n".join(lines) + "\n"


def pylock_toml(entries: list[dict[str, Any]], python: str) -> str:
    """A PEP 751 lock: one [[packages]] table per package, its wheel's URL and hash."""
    out = ['lock-version = "1.0"', f"requires-python = {_toml_str('==' + python + '.*')}", 'created-by = "envmatrix"', ""]
    for e in entries:
        filename = e["url"].rsplit("/", 1)[-1].replace("%2B", "+")
        kind = "wheels" if filename.endswith(".whl") else "sdist"
        out += ["[[packages]]", f"name = {_toml_str(e['name'])}", f"version = {_toml_str(e['version'])}"]
        if kind == "wheels":
            out += ["", "[[packages.wheels]]"]
        else:
            out += ["", "[packages.sdist]"]
        out += [f"name = {_toml_str(filename)}", f"url = {_toml_str(e['url'])}", f"hashes = {{sha256 = {_toml_str(e['sha256'])}}}", ""]
    return "\n".join(out)


def write_lock(records: list[dict[str, Any]], out_root: Path, env_id: str | None = None, best_gpu: str | None = None) -> Path:
    """Write reports/locks/<env>/ for a vetted environment; return the folder."""
    choice = select_environment(records, env_id, best_gpu)
    pins, build = _freeze_and_build(records, choice["env"])
    entries = pip_report(pins, build)
    folder: Path = out_root / "locks" / str(choice["env"])
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / "requirements.lock", requirements_lock(entries, choice["env"]))
    write_text_atomic(folder / "pylock.toml", pylock_toml(entries, choice["python"]))
    write_json_atomic(
        folder / "sources.json",
        {
            "environment": choice,
            "index_url": build.get("index_url"),
            "extra_index_urls": build.get("extra_index_urls"),
            "find_links": build.get("find_links"),
            "tool": build.get("tool"),
            "image": build.get("image"),
            "base_image": build.get("base_image"),
        },
    )
    return folder
