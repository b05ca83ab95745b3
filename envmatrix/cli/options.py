"""The options several commands share, each declared once: its flag, type, default and help.

A command adds one by calling it (`TIMEOUT.add(p)`), so `--timeout` means, checks and reads the same
everywhere. Where a command's default must differ (doctor's records go to a temporary folder, not
`reports`), `add` takes the default and how the help states it; the description stays the one here.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from ..backends.registry import NAMES as BACKEND_NAMES

#: What `add_parser(sub)` receives: the `add_subparsers()` of the envmatrix parser.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
#: A parser or an argument group of one: anything an option can be added to.
Container: TypeAlias = "argparse._ActionsContainer"

MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_JOBS = 256
DEFAULT_RESULTS = "reports/results"
_KEEP = object()


def seconds(text: str) -> float:
    """--timeout: a finite number of seconds above 0 (0, negatives and nan would mean 'no time' or 'no limit')."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds; write one such as 600") from None
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT_S):
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of seconds above 0 and at most {MAX_TIMEOUT_S:g} (a week), such as 600")
    return value


def bounded_int(what: str, lo: int, hi: int, example: str) -> Callable[[str], int]:
    """An argparse type: a whole number in [lo, hi], else a message naming `what` and an example."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}; write one such as {example}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text!r}: {what} is {lo} to {hi}")
        return value

    return parse


jobs = bounded_int("a whole number of cells at once", 1, MAX_JOBS, "2")


def shard_arg(text: str) -> tuple[int, int]:
    """`I/N` with 1 <= I <= N: argparse reports anything else as a usage error (exit status 2)."""
    m = re.fullmatch(r"([0-9]+)/([0-9]+)", text)
    if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
        raise argparse.ArgumentTypeError(f"'{text}' is not a shard: write I/N with 1 <= I <= N, e.g. 2/4 for the second of four")
    return int(m.group(1)), int(m.group(2))


def output_format(text: str) -> str:
    """--format: `table`, what plan and catalog called text before, still means text."""
    return "text" if text == "table" else text


@dataclass(frozen=True)
class Option:
    """One shared option. The help a command shows is `help (default: note)`."""

    flags: tuple[str, ...]
    help: str
    default: Any = None
    note: str | None = None  # how the help states the default; None: the option says nothing of one
    settings: Mapping[str, Any] = field(default_factory=dict)  # type, choices, action, metavar

    def add(self, parser: Container, *, default: Any = _KEEP, note: str | None = None) -> argparse.Action:
        """Add the option to a command (or an argument group of one), with this command's default if it has its own."""
        value = self.default if default is _KEEP else default
        said = note or self.note
        text = f"{self.help} (default: {said})" if said else self.help
        return parser.add_argument(*self.flags, default=value, help=text, **self.settings)


FILE = Option(("--file",), "the matrix file", "matrix.yaml", "./matrix.yaml")
PROFILE = Option(("--profile",), "profile in the matrix file", "auto", "gpu on a GPU host, else cpu")
GPU = Option(("--gpu",), "matrix GPU type: only its cells", None, "this host's")
ONLY = Option(("--only",), "keep cells whose id matches (fnmatch, braces); repeatable", [], None, {"action": "append", "metavar": "PATTERN"})
SKIP = Option(("--skip",), "drop cells whose id matches; repeatable", [], None, {"action": "append", "metavar": "PATTERN"})
SHARD = Option(("--shard",), "only shard I of N: environments kept whole, cost-balanced per GPU type", None, None, {"type": shard_arg, "metavar": "I/N"})
TIMEOUT = Option(("--timeout",), "seconds one probe run may take before it is killed, above 0", 600.0, "600", {"type": seconds, "metavar": "SECONDS"})
JOBS = Option(
    ("--jobs",),
    f"cells at once, 1 to {MAX_JOBS} (on a GPU host each slot owns whole GPUs); environments are prepared beside them",
    None,
    "what the host carries: its GPUs of the types it runs, else its cores (a cell takes one per rank)",
    {"type": jobs, "metavar": "N"},
)
BACKEND = Option(
    ("--backend",),
    "how environments are made: venv, docker, or host (this interpreter); auto is docker on a GPU host with a reachable engine, else venv",
    "auto",
    "auto",
    {"choices": BACKEND_NAMES},
)
REPORTS = Option(("--reports",), "output folder: records go to REPORTS/results, logs to REPORTS/logs", "reports", "reports")
RESULTS = Option(
    ("--results",),
    "a results folder (a matrix run's records), or for report and lock a site envmatrix publish wrote (its folder or http(s) URL); repeat to merge several",
    None,
    DEFAULT_RESULTS,
    {"action": "append", "metavar": "DIR"},
)
TRUST = Option(
    ("--trust",),
    "a signer's public key (ed25519 PEM, openssl pkey -pubout); repeatable. With any, only records verified against one count; the rest are shown apart",
    [],
    None,
    {"action": "append", "metavar": "PUBKEY"},
)
VENVS = Option(("--venvs",), "where the venv backend keeps its environments", ".envmatrix/venvs", ".envmatrix/venvs")
FORMAT = Option(
    ("--format",), "text for people, json for programs; table is the old name of text", "text", "text", {"type": output_format, "choices": ("text", "json")}
)
JSON = Option(("--json",), "the same as --format json", argparse.SUPPRESS, None, {"action": "store_const", "const": "json", "dest": "format"})

#: Every shared option (the tests check that each command's copy of a flag is one of these).
SHARED = (FILE, PROFILE, GPU, ONLY, SKIP, SHARD, TIMEOUT, JOBS, BACKEND, REPORTS, RESULTS, TRUST, VENVS, FORMAT, JSON)


def add_selection(parser: Container) -> None:
    """--only and --skip: which cells of the profile."""
    ONLY.add(parser)
    SKIP.add(parser)


def add_format(parser: Container, *, json_alias: bool = False, extra: Mapping[str, str] | None = None) -> None:
    """--format text|json, and --json as its alias where a command had it before --format; `extra`: formats only this
    command writes (check's sarif), each with what it is, after the shared ones."""
    action = FORMAT.add(parser)
    if extra:
        action.choices = (*FORMAT.settings["choices"], *extra)
        action.help = f"{FORMAT.help}; {'; '.join(f'{k}: {v}' for k, v in extra.items())} (default: {FORMAT.note})"
    if json_alias:
        JSON.add(parser)


def results_folders(values: list[str] | None) -> list[str]:
    """--results as given, or the default folder when none was (an appending option cannot default to a list)."""
    return values or [DEFAULT_RESULTS]
