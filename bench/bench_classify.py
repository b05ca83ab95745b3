"""Classify generated training logs: prints seconds, throughput and peak memory (RSS) for each.

    python bench/bench_classify.py [--size-mb 1000] [--kind normal|adversarial|both] [--keep DIR]

`normal`: realistic noise (progress bars with \\r, rank-prefixed INFO lines, healthy metric dicts, ANSI
colours) with a SIGFPE of rank 1 followed by rank 0's NCCL watchdog near the end.
`adversarial`: what made the old backtracking scanner exponential, at every line: id lists with `\\r`,
brackets and colons between repeats of short tokens, runs of words, `loss loss loss …`, exception lines,
a 3 MiB line without a line end, non-UTF-8 bytes; the same failure at the end.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NOISE = [
    b"\x1b[32m[INFO]\x1b[0m [rank0]: step %d/100000 lr=1.0e-06 throughput=1234.5 tokens/s\n",
    b" 42%%|\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88\xe2\x96\x88      | %d/10000 [01:02<02:03,  1.23it/s]\r",
    b"{'loss': 0.0, 'grad_norm': 0.%d, 'learning_rate': 1e-06, 'reward': 0.5, 'reward_std': 0.31, 'kl': 0.0001}\n",
    b"[rank1]: NCCL INFO Channel 00/%d : 0[0] -> 1[1] via P2P/IPC\n",
]
HOSTILE = [
    b", 12" + b",\r 12" * 9 + b", [x]: 12" * 6 + b", 1%d\n",
    b"loss " * 30 + b"loss: n%d\n",
    b"[rank0]: ValueError: step %d " + b"in " * 40 + b"\n",
    b"<|endoftext|>" * 7 + b"<|im_start|>%d\r" + b"\xff\xfe\x80" * 10 + b"\n",
    b"completion: " + b"ab cd " * 20 + b"%d\n",
    b"Expected to mark a variable ready only " + b"\r " * 30 + b"%d\n",
]
TAIL = (
    b"[h20-0:1520757:0:1520757] Caught signal 8 (Floating point exception: integer divide by zero)\n"
    b"[rank0]:[E ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7753)\n"
)


def generate(path: Path, size: int, kind: str) -> None:
    lines = NOISE if kind == "normal" else HOSTILE
    block = b"".join(lines[i % len(lines)] % (i + 1) for i in range(20000))
    with path.open("wb") as fh:
        written = 0
        if kind == "adversarial":
            fh.write(b"x, 7" * (3 << 18))  # 3 MiB without a line end
        while written < size:
            fh.write(block)
            written += len(block)
        fh.write(TAIL)


def measure(path: Path) -> None:
    # Classify in a fresh process so its peak RSS is the classifier's alone.
    code = (
        "import resource,time,json; from envmatrix.cli import main; t=time.perf_counter();"
        f"rc=main(['classify', {str(path)!r}, '--json']); print('exit', rc); "
        "print('seconds', round(time.perf_counter()-t, 2)); "
        "print('peak_rss_mib', round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024, 1))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    print(out.strip())
    if int(out.split("exit", 1)[1].split()[0]) == 2:
        sys.exit(f"classify refused {path} (exit 2): larger than the bound on a log (probes/untrusted.py)? use a smaller --size-mb")
    secs = float(out.split("seconds")[1].split()[0])
    print(f"throughput {path.stat().st_size / 2**20 / secs:.0f} MiB/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mb", type=int, default=1000, help="the log's size (a log over 1 GiB is refused, so 1000 by default)")
    parser.add_argument("--kind", choices=("normal", "adversarial", "both"), default="both")
    parser.add_argument("--keep", default=None, help="folder to keep the generated logs in")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        for kind in ("normal", "adversarial") if args.kind == "both" else (args.kind,):
            path = folder / f"{kind}.log"
            t = time.perf_counter()
            generate(path, args.size_mb << 20, kind)
            print(f"== {kind}: generated {path.stat().st_size / 2**20:.0f} MiB in {time.perf_counter() - t:.1f} s")
            measure(path)
            if not args.keep:
                path.unlink()


if __name__ == "__main__":
    main()
