"""Artefacts that survive crashes, full disks and concurrent writers: atomic writes, forgiving reads."""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

from probes import untrusted

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


def _bounds(limit: int, kind: str) -> untrusted.Kind:
    return untrusted.Kind(kind, limit, max_depth=64)


def read_bytes_bounded(path: Path, limit: int, kind: str, error: type[InputError] = InputError) -> bytes:
    """The bytes of an untrusted file, read once: a regular file of at most `limit` bytes (probes/untrusted.py);
    otherwise `error` naming the path and why (`kind` says what the file should be: "a record", "a probe result")."""
    try:
        return untrusted.read_bytes(path, _bounds(limit, kind))
    except untrusted.Refused as exc:
        raise error(str(exc)) from None


def read_json_bounded(path: Path, limit: int, kind: str, error: type[InputError] = InputError) -> Any:
    """The JSON value in an untrusted file: `read_bytes_bounded`, then JSON nested and numbered within bounds
    (probes/untrusted.py); otherwise `error` naming the path and why."""
    try:
        return untrusted.read_json(path, _bounds(limit, kind))
    except untrusted.Refused as exc:
        raise error(str(exc)) from None
