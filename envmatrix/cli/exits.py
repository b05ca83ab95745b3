"""How `main` turns what went wrong into a message and an exit status: no traceback unless --debug."""

from __future__ import annotations

import contextlib
import errno
import os
import sys

from ..errors import EnvmatrixError, SpecError, printable

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a reader that went away


def os_problem(exc: OSError) -> str:
    """An OSError that no command turned into its own message: the path, the reason, what to do."""
    where = f"{exc.filename}: " if exc.filename else "standard output: " if exc.errno in (errno.ENOSPC, errno.EIO, errno.EBADF) else ""
    hint = {
        errno.ENOSPC: "free some space or write elsewhere",
        errno.EDQUOT: "free some space or write elsewhere",
        errno.EACCES: "choose a folder you can write (--out, --reports)",
        errno.EPERM: "choose a folder you can write (--out, --reports)",
        errno.EROFS: "choose a folder on a writable file system (--out, --reports)",
        errno.EEXIST: "it is a file where a folder is needed; choose another --out/--reports",
        errno.ENOTDIR: "part of the path is a file, not a folder; choose another --out/--reports",
        errno.EISDIR: "it is a folder where a file is needed",
    }.get(exc.errno or 0, "check the path and the disk")
    return f"{where}{exc.strerror or exc}; {hint}"


def print_error(exc: EnvmatrixError) -> None:
    """Print an error with control characters escaped: names from files must not drive the terminal."""
    lines = exc.problems if isinstance(exc, SpecError) else str(exc).split("\n")
    text = "\n".join(printable(line) for line in lines)
    with contextlib.suppress(OSError):  # stderr itself gone: the exit status is all that is left to say it
        print(f"envmatrix: error: {text}", file=sys.stderr)


def drop_stdout() -> None:
    """Point standard output at /dev/null so the interpreter's final flush cannot fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, AttributeError, ValueError):
        pass
