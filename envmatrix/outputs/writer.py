"""The one writer of files and folders a user names (`init --file`, `watch --summary`, `publish --out`,
`report --out`, `lock --out`): the rules below hold for every command, so none can cost a user a file.

- A regular file is replaced atomically (a temporary file beside it, fsync, rename), keeping its mode; a new
  file gets the mode `open` gives (0666 less the umask).
- A symbolic link is followed: what it points to is written and the link stays a link (the rule for every
  command; a link to something that is not a regular file is refused like that thing).
- A folder, FIFO, device or socket where a file is expected is refused (exit 2): nothing is deleted, nothing
  is written into a device (`--summary /dev/stdout` as root would otherwise replace a node of /dev).
- A folder envmatrix did not write is never emptied: a folder it replaces whole (a published site) carries a
  marker file of its own (`MARKER`), and a non-empty folder without it is refused.

Callers print their answer before they write, so a failed write loses nothing but the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import uuid
from collections.abc import Callable
from pathlib import Path

from ..errors import OutputError

#: The file a folder envmatrix wrote whole carries; its content names the command that wrote it.
MARKER = ".envmatrix-written"
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def resolve(path: Path) -> Path:
    """Where writing `path` lands: a symbolic link's target (followed to its end), else `path` itself."""
    try:
        return Path(os.path.realpath(path, strict=False)) if os.path.islink(path) else path
    except (OSError, RuntimeError) as exc:  # a link loop
        raise OutputError(f"{path}: a symbolic link that cannot be followed ({exc}); name the file itself") from None


def file_target(path: Path, what: str = "the output") -> tuple[Path, int | None]:
    """Where a file named `path` would be written and the mode to keep (None: a new file); OutputError when it
    is a folder, FIFO, device or socket. Callers may check before the work, so nothing is done for a refused path."""
    real = resolve(path)
    try:
        info = os.stat(real)
    except FileNotFoundError:
        return real, None
    except OSError as exc:
        raise OutputError(f"{path}: cannot be written ({exc.strerror or exc}); choose another {what}") from None
    if not stat.S_ISREG(info.st_mode):
        shown = f"{path} (a link to {real})" if real != path else str(path)
        raise OutputError(f"{shown}: {_kind(info.st_mode)}, not a file; envmatrix writes {what} only as a regular file: name a file")
    return real, stat.S_IMODE(info.st_mode)


def write_file(path: Path, data: bytes | str, what: str = "the output") -> Path:
    """Write `data` (text is UTF-8) to the file a user named, by the module's rules; the path written (a link's
    target). On any failure the previous file is as it was and the error is an OutputError (exit 2)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    real, mode = file_target(path, what)
    tmp = real.with_name(f".{real.name}.{uuid.uuid4().hex}.tmp")
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
        with os.fdopen(fd, "wb") as fh:
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        file_target(path, what)  # still a file (or still absent) just before the rename
        os.replace(tmp, real)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        where = exc.filename if exc.filename and str(exc.filename) != str(tmp) else path
        raise OutputError(f"{where}: cannot write: {exc.strerror or exc}; the previous file (if any) is unchanged") from None
    except OutputError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return real


def check_files(paths: list[Path], what: str = "the output") -> None:
    """`file_target` for each path: OutputError for the first that would be refused (call before the work)."""
    for path in paths:
        file_target(path, what)


def write_files(files: list[tuple[Path, bytes | str]], what: str = "the output") -> list[Path]:
    """Several files of one answer (a report's table, CSV, JSON): every path checked before any is written, so a
    refused one leaves all of them as they were; then each written by `write_file`."""
    check_files([path for path, _ in files], what)
    return [write_file(path, data, what) for path, data in files]


def folder_target(out: Path, what: str = "--out") -> Path:
    """Where a folder written whole lands (a link's target); OutputError unless it is absent, an empty folder or
    a folder envmatrix wrote (it holds `MARKER`). Callers check before the work."""
    real = resolve(out)
    try:
        info = os.stat(real)
    except FileNotFoundError:
        return real
    except OSError as exc:
        raise OutputError(f"{what} {out}: cannot be used ({exc.strerror or exc}); choose another folder") from None
    if not stat.S_ISDIR(info.st_mode):
        raise OutputError(f"{what} {out}: {_kind(info.st_mode)}, not a folder; choose a new or empty folder")
    try:
        empty = not any(os.scandir(real))
    except OSError as exc:
        raise OutputError(f"{what} {out}: cannot be read ({exc.strerror or exc}); choose another folder") from None
    marker = real / MARKER
    if not empty and not (marker.is_file() and not marker.is_symlink()):
        raise OutputError(
            f"{what} {out}: a folder envmatrix did not write (no {MARKER}); it is never emptied: choose a new or empty folder, or move its files away yourself"
        )
    return real


def write_folder(out: Path, fill: Callable[[Path], None], by: str, what: str = "--out") -> Path:
    """Build a folder in a fresh one beside `out` with `fill(staging)`, mark it as envmatrix's, and swap it in
    whole (a web server never serves half of it); the previous folder is removed only after the swap and only
    when `folder_target` allowed it. The path written (a link's target)."""
    real = folder_target(out, what)
    staging = real.parent / f".{real.name}.{uuid.uuid4().hex}.tmp"
    try:
        staging.mkdir(parents=True)
    except OSError as exc:
        raise OutputError(f"{real.parent}: cannot write there ({exc.strerror or exc}); choose another {what}") from None
    try:
        fill(staging)
        (staging / MARKER).write_text(json.dumps({"written_by": by}) + "\n")
        folder_target(out, what)  # still ours, empty or absent just before the swap
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    old = real.parent / f".{real.name}.{uuid.uuid4().hex}.old"
    try:
        if real.exists():
            real.rename(old)
        staging.rename(real)
    except OSError as exc:
        raise OutputError(f"{out}: cannot put the new folder in place ({exc.strerror or exc}); it is left in {staging}") from None
    shutil.rmtree(old, ignore_errors=True)
    return real
