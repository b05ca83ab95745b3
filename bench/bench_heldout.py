"""Score the classifier on the held-out real logs (never tuned on) and on the tuning corpus: per set, the score of the
classifier as it was before it read logs as structure (commit BEFORE, run from `git archive` in a subprocess) and as it
is now; per class; and every miss with the class given and its evidence.

    python bench/bench_heldout.py [--before COMMIT] [--misses] [FOLDER...]

Sets: tests/data/heldout-logs-2 (gathered 2026-11-25, before the rebuild), tests/data/heldout-logs (the first held-out
set), tests/data/real-logs (the tuning corpus), tests/data/heldout-logs-3 (gathered 2026-11-27, after the rebuild).
A folder holds `*.log` files and an INDEX.tsv whose first two columns are the file and its expected class.
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

from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import scan_stream

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
HELDOUT = DATA / "heldout-logs-2"
#: The third held-out set (gathered 2026-11-27 by readers who never saw the classifier).
HELDOUT_3 = DATA / "heldout-logs-3"
SETS = (HELDOUT, DATA / "heldout-logs", DATA / "real-logs", HELDOUT_3)
#: The classifier before issue 32 (wordings only).
BEFORE = "f667aff"

Row = tuple[str, str, str, str]  # file, expected, got, evidence


def cases(folder: Path) -> list[tuple[str, str]]:
    lines = (folder / "INDEX.tsv").read_text().splitlines()[1:]
    return [(line.split("\t")[0], line.split("\t")[1]) for line in lines if line.strip()]


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
    return 0


if __name__ == "__main__":
    sys.exit(main())
