"""docs/drift.md's figures from a run's records: the drift table against the reference environment, the drift
controls, and the no-false-drift pairs (environments with the same torch and transformers that differ only in
packages that do not touch the model's numbers: trl, deepspeed, accelerate, peft, vllm), with the largest
difference of each quantity.

    python bench/drift_figures.py REPORTS/results [--reference ENV]
"""

from __future__ import annotations

import argparse
import itertools
from collections import defaultdict
from pathlib import Path

from envmatrix.outputs import drift
from envmatrix.records.record import Record, load_records


def pairs(records: list[Record]) -> list[drift.Comparison]:
    """Every two cells of one key whose environments share torch, transformers, CUDA, GPU and Python."""
    groups: dict[tuple[str, ...], list[Record]] = defaultdict(list)
    for r in records:
        if not drift.usable(r) or not drift.compared(r) or r.fault == drift.CONTROL_FAULT:
            continue
        c = r.cell
        same = (*drift.key(r), c.torch, c.transformers, c.cuda, c.gpu, c.python)
        groups[same].append(r)
    out = []
    for recs in groups.values():
        for a, b in itertools.combinations(sorted(recs, key=lambda r: r.id), 2):
            if a.env != b.env:
                out.append(drift.compare(a, b))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path)
    parser.add_argument("--reference", help="an environment id (default: the base)")
    args = parser.parse_args()
    records = load_records(args.results)
    rep = drift.report(records, args.reference)
    print(rep.text)
    print("\n| cell | reference | verdict | logp | loss | nll | grad norm (rel) | tolerance |\n|---|---|---|---|---|---|---|---|")
    for c in sorted(rep.comparisons, key=lambda c: (not c.drifts, c.record.cell.scenario, c.record.env)):
        w = c.worst
        verdict = c.first.text if c.first else "agrees"
        cols = " | ".join(f"{w[k]:.1e}" if k in w else "" for k in ("logp", "loss", "nll", "grad_norm"))
        print(f"| {'◆ ' if c.control else ''}{c.record.id} | {c.reference.env} | {verdict} | {cols} | {c.tolerance.logp:.0e} |")
    for c in rep.drifting:
        print("\nDRIFT", c.text)
    print("\nwithout a reference:", ", ".join(rep.without) or "none")
    same = pairs(records)
    print(f"\nno-false-drift pairs (same torch and transformers, other packages): {len(same)}; drifting: {sum(c.drifts for c in same)}")
    worst: dict[str, float] = {}
    identical = 0
    for c in same:
        identical += all(v == 0 for v in c.worst.values())
        for k, v in c.worst.items():
            worst[k] = max(worst.get(k, 0.0), v)
        if c.drifts:
            print(f"  DRIFT {c.reference.cell.scenario} → {c.text}")
    print(f"  bit-identical: {identical}/{len(same)}; largest: " + ", ".join(f"{k} {v:.1e}" for k, v in worst.items()))
    print("  what differs across them:", "; ".join(sorted({c.changed[0] for c in same if c.changed})))


if __name__ == "__main__":
    main()
