"""Score the classifier on the held-out real logs (never tuned on) and on the tuning corpus: per set, the score of the
classifier as it was before it read logs as structure (commit BEFORE, run from `git archive` in a subprocess) and as it
is now; per class; and every miss with the class given and its evidence.

    python bench/bench_heldout.py [--before COMMIT] [--misses] [FOLDER...]

Sets: tests/data/heldout-logs-2 (gathered 2026-11-25, before the rebuild), tests/data/heldout-logs (the first held-out
set), tests/data/real-logs (the tuning corpus), tests/data/heldout-logs-3 (gathered 2026-11-27, after the rebuild),
tests/data/heldout-logs-4 (gathered 2026-11-28 for issue 41, where present).
A folder holds `*.log` files and an INDEX.tsv whose first two columns are the file and its expected class. Where the
INDEX has `caller` and `callee` columns, each API mismatch's boundary is scored too: both sides named, in the right
direction (the verdict's caller and callee, verdict/boundary.py, against the reader's).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter
from io import BytesIO
from pathlib import Path

from envmatrix.facts.modules import STACK
from envmatrix.facts.nameindex import canonical, index
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import LogScan, scan_stream
from envmatrix.verdict.remedies import of_mismatch

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
HELDOUT = DATA / "heldout-logs-2"
#: The third held-out set (gathered 2026-11-27 by readers who never saw the classifier).
HELDOUT_3 = DATA / "heldout-logs-3"
#: The fourth (gathered 2026-11-28 for issue 41, with the caller and callee of each API mismatch).
HELDOUT_4 = DATA / "heldout-logs-4"
SETS = (HELDOUT, DATA / "heldout-logs", DATA / "real-logs", HELDOUT_3, *((HELDOUT_4,) if HELDOUT_4.is_dir() else ()))
#: The classifier before issue 32 (wordings only).
BEFORE = "f667aff"

Row = tuple[str, str, str, str]  # file, expected, got, evidence


def cases(folder: Path) -> list[tuple[str, str]]:
    lines = (folder / "INDEX.tsv").read_text().splitlines()[1:]
    return [(line.split("\t")[0], line.split("\t")[1]) for line in lines if line.strip()]


def sides(folder: Path) -> dict[str, tuple[str, str]]:
    """The reader's (caller, callee) of each log whose INDEX names them (columns `caller` and `callee`)."""
    lines = (folder / "INDEX.tsv").read_text().splitlines()
    head = lines[0].split("\t")
    if "caller" not in head or "callee" not in head:
        return {}
    at, ee = head.index("caller"), head.index("callee")
    out = {}
    for line in lines[1:]:
        cells = line.split("\t")
        if len(cells) > max(at, ee) and (cells[at].strip(" -") or cells[ee].strip(" -")):
            out[cells[0]] = (cells[at].strip(), cells[ee].strip())
    return out


def boundary(scan: LogScan) -> tuple[str, str]:
    """The verdict's (caller, callee) of the API mismatch a log shows ('your code' for the user's own), ('', '') if none."""
    crossed = of_mismatch(scan)
    if crossed is None:
        return "", ""
    return crossed.who, crossed.callee_who  # `open-r1 (your code)` where the frames' paths name the user's project


def same(said: str, expected: str, *, own_project: bool = False) -> bool:
    """One side as the reader wrote it (`your code`, `user`, a distribution or import name, `a or b`) and the verdict's.
    `own_project`: a caller the verdict calls `your code` counts as the reader's name for it when that name is no
    distribution the name index knows (a project run from its own checkout: the log shows a path, not a package)."""

    def norm(name: str) -> str:
        return canonical(name.strip()).replace(" ", "-")

    names = {norm(n) for n in expected.split("(")[0].replace(" or ", "/").replace(",", "/").split("/") if n.strip()}
    names |= {n.replace("-", "") for n in names}  # `LLaMA-Factory` is llamafactory's repository name
    names |= {"your-code"} if names & {"user", "user-code", "user-script", "your-code", "script"} else set()
    if said.endswith(" (your code)"):  # the user's project, named by its path
        if norm(said.removesuffix(" (your code)")) in names:
            return True
        said = "your code"
    if own_project and said == "your code" and names and not names & (set(index().releases) | {canonical(n) for n in STACK}):
        return True
    return norm(said or "-") in names or norm(said or "-").replace("-", "") in names or (not said and not names)


def score_sides(folder: Path) -> list[tuple[str, tuple[str, str], tuple[str, str]]]:
    """(file, the reader's sides, the verdict's sides) for each log whose INDEX names a caller and callee."""
    out = []
    for name, expected in sides(folder).items():
        with (folder / name).open("rb") as fh:
            out.append((name, expected, boundary(scan_stream(fh))))
    return out


def score(folder: Path = HELDOUT) -> tuple[int, int, list[Row]]:
    """(right, total, rows of file, expected, got, evidence) with the classifier in this checkout."""
    rows = []
    for name, expected in cases(folder):
        with (folder / name).open("rb") as fh:
            verdict = classify(RunFacts(scan=scan_stream(fh)))
        rows.append((name, expected, str(verdict.outcome), verdict.evidence[:120]))
    right = sum(expected == got for _, expected, got, _ in rows)
    return right, len(rows), rows


_OLD = """
import json, sys
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import scan_stream
out = {}
for path in sys.argv[1:]:
    with open(path, "rb") as fh:
        out[path] = str(classify(RunFacts(scan=scan_stream(fh))).outcome)
print(json.dumps(out))
"""


def score_before(folder: Path, commit: str) -> dict[str, str] | None:
    """What the classifier at `commit` says of each log, or None where that commit cannot be had (no git, a wheel)."""
    try:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "envmatrix"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        paths = [str((folder / name).resolve()) for name, _ in cases(folder)]
        done = subprocess.run(
            [sys.executable, "-c", _OLD, *paths], capture_output=True, text=True, cwd=tmp, env={"PYTHONPATH": tmp, "PATH": "/usr/bin:/bin"}, check=False
        )
        if done.returncode != 0:
            return None
        return {Path(k).name: v for k, v in json.loads(done.stdout).items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="*", type=Path)
    p.add_argument("--before", default=BEFORE, help=f"the commit whose classifier is 'before' (default {BEFORE})")
    p.add_argument("--misses", action="store_true", help="list every miss with its evidence")
    args = p.parse_args()
    for folder in args.folders or SETS:
        right, total, rows = score(folder)
        old = score_before(folder, args.before)
        before = f"{sum(old[n] == e for n, e, _, _ in rows)}/{total}" if old else "n/a (no git history here)"
        print(f"{folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder}: before ({args.before}) {before}, after {right}/{total}")
        per = Counter(e for _, e, _, _ in rows)
        hits = Counter(e for _, e, g, _ in rows if e == g)
        olds = Counter(e for n, e, _, _ in rows if old and old[n] == e)
        for klass in sorted(per):
            was = f"{olds[klass]}/{per[klass]}" if old else "-"
            print(f"    {klass:16} before {was:>6}  after {hits[klass]}/{per[klass]}")
        if args.misses:
            for name, expected, got, evidence in rows:
                if expected != got:
                    print(f"    MISS {name}: expected {expected}, got {got}: {evidence}")
        both = score_sides(folder)
        if both:
            strict = [n for n, (ec, ee), (gc, ge) in both if same(gc, ec) and same(ge, ee)]
            named = [n for n, (ec, ee), (gc, ge) in both if same(gc, ec, own_project=True) and same(ge, ee)]
            strictly = f"{len(strict)} when `your code` does not count for a user's own project"
            print(f"    caller and callee named, right way round: {len(named)}/{len(both)}; {strictly}")
            for name, (ec, ee), (gc, ge) in both:
                if name not in named and args.misses:
                    print(f"    SIDES {name}: expected {ec} -> {ee}, got {gc or '?'} -> {ge or '?'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
