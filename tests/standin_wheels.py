"""Stand-in wheels for the GPU rehearsal (tests/rehearsal.py), made from what this machine has:

- torch at any release: the one CPU torch wheel here, relabelled (`2.8.0+cpu`): its METADATA, dist-info
  folder, RECORD and torch/version.py say the new version, every other member is copied byte for byte
  (raw, not recompressed: seconds for a 190 MB wheel). It trains on CPU; it is no CUDA build, and says so.
- flash-attn: a wheel under the name the catalog predicts for the environment, whose `flash_attn_2_cuda`
  is a real C extension that refuses to import (no kernels), so the image's flash-attn step installs it,
  finds the extension and copies it out for its GPU architectures (none) as it does with the real one.
- a PEP 503 folder (`<root>/<build tag>/<project>/index.html`) that pip reads as PyTorch's index.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import html
import re
import shutil
import subprocess
import sysconfig
import tempfile
import zipfile
from pathlib import Path

LOCAL_TAG = "cpu"  # what the relabelled torch's version carries: it is the CPU build


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _raw_copy(src: zipfile.ZipFile, info: zipfile.ZipInfo, out: zipfile.ZipFile) -> None:
    """One member copied with its compressed bytes as they are (no data descriptor: wheels are written seekably)."""
    assert src.fp is not None and out.fp is not None
    src.fp.seek(info.header_offset)
    header = src.fp.read(30)
    name_len, extra_len = int.from_bytes(header[26:28], "little"), int.from_bytes(header[28:30], "little")
    body = src.fp.read(name_len + extra_len + info.compress_size)
    new = copy.copy(info)
    new.header_offset = out.fp.tell()
    out.fp.write(header + body)
    out.filelist.append(new)
    out.NameToInfo[new.filename] = new
    out.start_dir = out.fp.tell()


def relabel_torch(wheel: Path, version: str, folder: Path) -> Path:
    """The CPU torch wheel as torch `version`+cpu, in `folder` (made once, then reused)."""
    name_version = wheel.name.split("-")[1]
    new_version = f"{version}+{LOCAL_TAG}"
    target = folder / wheel.name.replace(f"-{name_version}-", f"-{new_version}-", 1)
    if target.is_file():
        return target
    if version == name_version.split("+")[0]:
        shutil.copy(wheel, target)
        return target
    folder.mkdir(parents=True, exist_ok=True)
    old_info, new_info = f"torch-{name_version}.dist-info/", f"torch-{new_version}.dist-info/"
    changed: dict[str, bytes] = {}
    part = target.with_suffix(".part")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(part, "w") as out:
        for info in src.infolist():
            if info.filename.startswith(old_info) or info.filename == "torch/version.py":
                data = src.read(info)
                name = info.filename.replace(old_info, new_info, 1)
                if name.endswith("/METADATA"):
                    data = re.sub(rb"^Version: .*$", f"Version: {new_version}".encode(), data, count=1, flags=re.M)
                elif name == "torch/version.py":
                    data = re.sub(rb"^__version__ = .*$", f"__version__ = '{new_version}'".encode(), data, count=1, flags=re.M)
                changed[name] = data
            else:
                _raw_copy(src, info, out)
        record = new_info + "RECORD"
        lines = []
        for line in changed.pop(record).decode().splitlines():
            path = line.rsplit(",", 2)[0].replace(old_info, new_info, 1)
            if path in changed:
                lines.append(f"{path},{_record_hash(changed[path])},{len(changed[path])}")
            elif path != record:
                lines.append(line)
        lines.append(f"{record},,")
        for name, data in changed.items():
            out.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data, compress_type=zipfile.ZIP_DEFLATED)
        out.writestr(zipfile.ZipInfo(record, date_time=(2026, 1, 1, 0, 0, 0)), "\n".join(lines) + "\n", compress_type=zipfile.ZIP_DEFLATED)
    part.replace(target)
    return target


STUB_EXTENSION = r"""
#include <Python.h>
/* envmatrix's stand-in for flash-attn's CUDA extension: present where the real one is, importable by name,
   and refusing to load (there are no kernels in it), as the real one does on a host without CUDA. */
PyMODINIT_FUNC PyInit_flash_attn_2_cuda(void) {
    PyErr_SetString(PyExc_ImportError, "flash_attn_2_cuda (envmatrix stand-in): no CUDA kernels in this rehearsal wheel");
    return NULL;
}
"""


def stub_flash_attn(wheel_name: str, folder: Path, *, include: str | None = None) -> Path:
    """A flash-attn wheel named `wheel_name` (the catalog's name for an environment) with a stand-in
    `flash_attn_2_cuda` C extension compiled here for the wheel's Python (its tag: cp311 → 3.11)."""
    target = folder / wheel_name
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    _, version, py_tag, abi_tag, platform = wheel_name[: -len(".whl")].split("-")
    py = f"{py_tag[2]}.{py_tag[3:]}"
    include = include or sysconfig.get_paths()["include"]
    if not (Path(include) / "Python.h").is_file() or f"python{py}" not in include:
        include = f"/usr/include/python{py}"
    suffix = f".cpython-{py_tag[2:]}-x86_64-linux-gnu.so"
    with tempfile.TemporaryDirectory(prefix="envmatrix-stubfa-") as tmp:
        source, library = Path(tmp) / "stub.c", Path(tmp) / f"flash_attn_2_cuda{suffix}"
        source.write_text(STUB_EXTENSION)
        subprocess.run(["gcc", "-shared", "-fPIC", f"-I{include}", "-o", str(library), str(source)], check=True, capture_output=True)
        info = f"flash_attn-{version}.dist-info"
        files: dict[str, bytes] = {
            "flash_attn/__init__.py": f'"""envmatrix stand-in: no kernels."""\n__version__ = "{version.split("+")[0]}"\n'.encode(),
            library.name: library.read_bytes(),
            f"{info}/METADATA": f"Metadata-Version: 2.1\nName: flash_attn\nVersion: {version}\nSummary: envmatrix rehearsal stand-in\n".encode(),
            f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: envmatrix-rehearsal\nRoot-Is-Purelib: false\nTag: {py_tag}-{abi_tag}-{platform}\n".encode(),
            f"{info}/top_level.txt": b"flash_attn\nflash_attn_2_cuda\n",
        }
        record = "".join(f"{n},{_record_hash(d)},{len(d)}\n" for n, d in files.items()) + f"{info}/RECORD,,\n"
        part = target.with_suffix(".part")
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as out:
            for name, data in {**files, f"{info}/RECORD": record.encode()}.items():
                out.writestr(name, data)
        part.replace(target)
    return target


def pep503(root: Path, tag: str, wheels: list[Path]) -> Path:
    """`root/tag/<project>/index.html` listing these wheels (hard-linked beside it): PyTorch's index layout."""
    projects: dict[str, list[Path]] = {}
    for wheel in wheels:
        projects.setdefault(wheel.name.split("-")[0].lower().replace("_", "-"), []).append(wheel)
    for project, files in projects.items():
        folder = root / tag / project
        folder.mkdir(parents=True, exist_ok=True)
        for wheel in files:
            link = folder / wheel.name
            if not link.exists():
                try:
                    link.hardlink_to(wheel)
                except OSError:
                    shutil.copy(wheel, link)
        anchors = "".join(f'<a href="{html.escape(w.name.replace("+", "%2B"))}">{html.escape(w.name)}</a>\n' for w in sorted(folder.glob("*.whl")))
        (folder / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{anchors}</body></html>\n")
    (root / tag).mkdir(parents=True, exist_ok=True)
    links = "".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(d.name for d in (root / tag).iterdir() if d.is_dir()))
    (root / tag / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    return root / tag
