"""Hostile inputs to the readers of `init`, `watch`, `publish` and `preflight` that cost time, memory or secrets
before (issue 42): each case builds its files in a folder and gives the command line, the exit status it must end
with and a phrase its message must hold. Shared by tests/hostile/test_reader_bounds.py (assertions) and
bench/bench_hostile_inputs.py --readers (figures: exit, seconds, peak memory)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

#: A secret in the command's environment: no message may show it.
SECRET = "envmatrix-test-secret-3f9c1d"
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Case:
    build: Callable[[Path], list[str]]  # makes the files under the folder; the command line
    status: int
    says: str


def _init(tmp: Path, source: Path) -> list[str]:
    return ["init", "--from", str(source), "--file", str(tmp / "matrix.yaml"), "--gpu", "cpu"]


def _file(tmp: Path, name: str, data: bytes | str) -> Path:
    path = tmp / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def proc_environ(tmp: Path) -> list[str]:
    return _init(tmp, _file(tmp, "requirements.txt", "torch==2.13.0\n-r /proc/self/environ\n"))


def included_secret(tmp: Path) -> list[str]:
    _file(tmp, "secrets.env", f"API_TOKEN={SECRET}\n")
    return _init(tmp, _file(tmp, "requirements.txt", "torch==2.13.0\ntransformers==4.57.6\n-r secrets.env\n"))


def versionless_pylock(tmp: Path) -> list[str]:
    body = "".join(f'[[packages]]\nname = "pkg-{i}"\ndirectory = {{ path = "pkgs/{i}" }}\n\n' for i in range(9_000))
    return _init(tmp, _file(tmp, "pylock.toml", 'lock-version = "1.0"\nrequires-python = ">=3.11"\n\n' + body))


def big_uv_lock(tmp: Path) -> list[str]:
    """A uv.lock of realistic shape, about 12 MiB: 2,400 packages with 20 wheels each (torch's has dozens)."""
    parts = ['version = 1\nrequires-python = ">=3.11"\n\n']
    for i in range(2_400):
        name = "torch" if i == 0 else "transformers" if i == 1 else f"pkg-{i}"
        version = "2.13.0" if i == 0 else "4.57.6" if i == 1 else f"1.{i}.0"
        wheels = ",\n".join(
            f'    {{ url = "https://files.example.org/packages/{i:04x}/{w:02x}/{name}-{version}-cp311-cp311-manylinux_2_28_x86_64.whl", '
            f'hash = "sha256:{(i * 31 + w):064x}", size = {1000 + w}, upload-time = "2026-01-01T00:00:00Z" }}'
            for w in range(20)
        )
        parts.append(
            f'[[package]]\nname = "{name}"\nversion = "{version}"\nsource = {{ registry = "https://pypi.org/simple" }}\n'
            f'dependencies = [\n    {{ name = "numpy" }},\n]\nwheels = [\n{wheels},\n]\n\n'
        )
    return _init(tmp, _file(tmp, "uv.lock", "".join(parts)))


def dotted_header(tmp: Path) -> list[str]:
    return _init(tmp, _file(tmp, "pylock.toml", 'lock-version = "1.0"\n[' + ".".join(["a"] * 250_000) + "]\n"))


def long_key(tmp: Path) -> list[str]:
    return _init(tmp, _file(tmp, "pylock.toml", 'lock-version = "1.0"\n' + "k" * 500_000 + " = 1\n"))


def toml_100_digits(tmp: Path) -> list[str]:
    return _init(tmp, _file(tmp, "pylock.toml", 'lock-version = "1.0"\nsize = ' + "9" * 100 + "\n"))


def same_include_63(tmp: Path) -> list[str]:
    _file(tmp, "big.txt", "".join(f"pkg-{i % 9000}>=1.0\n" for i in range(60_000))[: (1 << 20) - 4096])
    return _init(tmp, _file(tmp, "requirements.txt", "torch==2.13.0\ntransformers==4.57.6\n" + "-r big.txt\n" * 63))


def version_5000_digits(tmp: Path) -> list[str]:
    return _init(tmp, _file(tmp, "requirements.txt", "torch==2." + "1" * 5_000 + "\n"))


def version_60_digits(tmp: Path) -> list[str]:
    return _init(tmp, _file(tmp, "requirements.txt", "torch==2.13.0\ntransformers==4." + "5" * 60 + "\n"))


def wheels_int(tmp: Path) -> list[str]:
    return _init(tmp, _file(tmp, "pylock.toml", 'lock-version = "1.0"\n[[packages]]\nname = "torch"\nversion = "2.13.0"\nwheels = [5]\n'))


def url_int(tmp: Path) -> list[str]:
    return _init(tmp, _file(tmp, "uv.lock", 'version = 1\n[[package]]\nname = "torch"\nversion = "2.13.0"\nwheels = [{ url = 5 }]\n'))


def _fake_python(tmp: Path, body: str) -> Path:
    path = tmp / "python"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def endless_interpreter(tmp: Path) -> list[str]:
    python = _fake_python(tmp, "exec yes " + "x" * 64)
    return ["init", "--current", str(python), "--file", str(tmp / "m.yaml"), "--gpu", "cpu"]


def deep_json_interpreter(tmp: Path) -> list[str]:
    deep = "[" * 200_000 + "]" * 200_000
    _file(tmp, "answer.json", deep)
    return ["init", "--current", str(_fake_python(tmp, f"cat {tmp / 'answer.json'}")), "--file", str(tmp / "m.yaml"), "--gpu", "cpu"]


def escaping_interpreter(tmp: Path) -> list[str]:
    return ["init", "--current", str(_fake_python(tmp, "printf '\\033]0;owned\\007\\033[2J' >&2; exit 3")), "--file", str(tmp / "m.yaml"), "--gpu", "cpu"]


def yaml_escape(tmp: Path) -> list[str]:
    text = (ROOT / "matrix.yaml").read_text().replace("profiles:", "profiles:\n  # \x1b]0;owned\x07", 1)
    return ["plan", "--file", str(_file(tmp, "matrix.yaml", text))]


def yaml_nul(tmp: Path) -> list[str]:
    return ["plan", "--file", str(_file(tmp, "matrix.yaml", "version: 1\nprofiles:\n  a\x00: 1\n"))]


def profile_quoted(tmp: Path) -> list[str]:
    return [*_init(tmp, _file(tmp, "requirements.txt", "torch==2.13.0\ntransformers==4.57.6\n")), "--profile", "'q'"]


def summary_device(tmp: Path) -> list[str]:
    return ["watch", "--file", str(ROOT / "matrix.yaml"), "--profile", "cpu", "--summary", "/dev/null"]


def publish_foreign(tmp: Path) -> list[str]:
    docs = tmp / "docs"
    docs.mkdir()
    _file(docs, "index.json", '{"site_version": 1, "records": []}')
    _file(docs, "thesis.tex", "years of work")
    from records_factory import make_record

    from envmatrix.records.record import cell_stem, write_record

    rec = make_record("ok", gpu="cpu", cuda="none")
    write_record(tmp / "results" / f"{cell_stem(rec.id)}.json", rec)
    return ["publish", "--results", str(tmp / "results"), "--out", str(docs)]


CASES: dict[str, Case] = {
    "requirements -r /proc/self/environ": Case(proc_environ, 2, "nothing is read from /proc"),
    "requirements -r a file of secrets": Case(included_secret, 2, "not quoted"),
    "pylock.toml 9,000 version-less packages": Case(versionless_pylock, 2, "no exact pin of torch"),
    "uv.lock 12 MiB, 2,400 packages x 20 wheels": Case(big_uv_lock, 0, ""),
    "pylock.toml dotted header 500 KB": Case(dotted_header, 2, "nested more than 32 levels"),
    "pylock.toml key of 500,000 characters": Case(long_key, 2, "a key of"),
    "pylock.toml 100-digit integer": Case(toml_100_digits, 2, "more than 40 digits"),
    "requirements: 63 includes of one 1 MiB file": Case(same_include_63, 0, ""),
    "requirements: version of 5,000 digits": Case(version_5000_digits, 2, "no release has a number longer than 40 digits"),
    "requirements: version of 60 digits": Case(version_60_digits, 2, "no release has a number longer than 40 digits"),
    "pylock.toml wheels = [5]": Case(wheels_int, 2, "wheels[0] must be a table"),
    "uv.lock url = 5": Case(url_int, 2, "wheels[0] must be a table"),
    "init --current printing without end": Case(endless_interpreter, 2, "printed more than 4 MiB"),
    "init --current answering deep JSON": Case(deep_json_interpreter, 2, "nested more than 4 levels"),
    "init --current printing escapes": Case(escaping_interpreter, 3, "did not answer"),
    "matrix.yaml with an ESC byte": Case(yaml_escape, 2, "control character U+001B"),
    "matrix.yaml with a NUL byte": Case(yaml_nul, 2, "control character U+0000"),
    "init --profile \"'q'\"": Case(profile_quoted, 2, "--profile: profile name"),
    "watch --summary /dev/null": Case(summary_device, 2, "a device, not a file"),
    "publish --out a folder with index.json and a thesis": Case(publish_foreign, 2, "a folder envmatrix did not write"),
}


def environment() -> dict[str, str]:
    """The command's environment: this one with the secret in it."""
    return {**os.environ, "API_TOKEN": SECRET}
