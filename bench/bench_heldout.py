"""Score the classifier on the held-out real logs (tests/data/heldout-logs/, never tuned on): per file the
expected class, the class given and the evidence line; then the score.

    python bench/bench_heldout.py [FOLDER]
"""

from __future__ import annotations

import sys
from pathlib import Path

from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import scan_stream

ROOT = Path(__file__).resolve().parent.parent
HELDOUT = ROOT / "tests" / "data" / "heldout-logs"


def score(folder: Path = HELDOUT) -> tuple[int, int, list[tuple[str, str, str, str]]]:
    """(right, total, rows of file, expected, got, evidence)."""
    rows = []
    for line in (folder / "INDEX.tsv").read_text().splitlines()[1:]:
        name, expected = line.split("\t")[:2]
        with (folder / name).open("rb") as fh:
            verdict = classify(RunFacts(scan=scan_stream(fh)))
        rows.append((name, expected, str(verdict.outcome), verdict.evidence[:100]))
    right = sum(expected == got for _, expected, got, _ in rows)
    return right, len(rows), rows


def main() -> int:
    right, total, rows = score(Path(sys.argv[1]) if len(sys.argv) > 1 else HELDOUT)
    for name, expected, got, evidence in rows:
        print(f"{'ok  ' if expected == got else 'MISS'} {name}: expected {expected}, got {got}: {evidence}")
    print(f"held-out score: {right}/{total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
