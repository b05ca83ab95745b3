"""Artefacts that survive crashes, full disks and concurrent writers: atomic writes, forgiving reads."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import uuid
from pathlib import Path
from typing import Any

from .errors import InputError, OutputError


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write to a unique temporary file beside `path`, fsync, then rename over it: readers and other
    writers see a whole file or the previous one, never a torn one. On any failure (a full disk, a
    read-only folder) the temporary file is removed, the previous file is left as it was, and the
    error is an OutputError naming the path."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tmp.open("wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        where = exc.filename if exc.filename and str(exc.filename) != str(tmp) else path
        raise OutputError(f"{where}: cannot write: {exc.strerror or exc}; the previous file (if any) is unchanged") from None


def write_text_atomic(path: Path, text: str) -> None:
    """`write_bytes_atomic` for UTF-8 text."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, data: Any) -> None:
    """`write_bytes_atomic` for a JSON document (indented: records are read by people too)."""
    write_text_atomic(path, json.dumps(data, indent=2, default=str))


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from a file, or None when it is missing, torn or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_bytes_bounded(path: Path, limit: int, kind: str, error: type[InputError] = InputError) -> bytes:
    """The bytes of an untrusted file: a regular file of at most `limit` bytes; otherwise `error` naming the
    path and why (`kind` says what the file should be: "a record", "a probe result")."""
    try:
        info = path.stat()
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise error(f"{path}: not a regular file")
    if info.st_size > limit:
        raise error(f"{path}: {info.st_size} bytes, larger than {kind} can be ({limit})")
    try:
        with path.open("rb") as fh:
            raw = fh.read(limit + 1)
    except OSError as exc:
        raise error(f"{path}: cannot be read ({exc.strerror})") from None
    if len(raw) > limit:  # it grew since stat
        raise error(f"{path}: larger than {kind} can be ({limit})")
    return raw


def read_json_bounded(path: Path, limit: int, kind: str, error: type[InputError] = InputError) -> Any:
    """The JSON value in an untrusted file (`read_bytes_bounded`), or `error` when it is not JSON."""
    raw = read_bytes_bounded(path, limit, kind, error)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise error(f"{path}: not JSON (torn or not {kind})") from None
