"""Scan a training log for failure signatures and trainer metrics, in bounded memory and time.

The log is read in 1 MiB chunks of whole lines as bytes, ANSI colour codes removed, and searched
with one compiled pattern per job (C speed). Only the lines that match are decoded, so a 1 GB log
costs seconds and a few MiB. `\\r`-rewritten progress bars, rank prefixes, non-UTF-8 bytes and
terminal-wrapped dicts need no special handling: the patterns do not depend on line structure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import BinaryIO

CHUNK = 1 << 20
MAX_LINE = 1 << 16  # a "line" longer than this is cut when quoted as evidence
EVIDENCE_CHARS = 400
METRIC_VALUES_KEPT = 64

_ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")

# name → pattern; names are `<outcome>:<variant>`, the most decisive variant of an outcome first (its
# hit is the evidence quoted). Case matters: `--fault sigfpe` in a command line is not a SIGFPE.
# Phrases allow any white space (terminal wrapping) between words.
SIGNATURES: dict[str, str] = {
    "sigfpe:ucx": r"Caught signal 8\b",
    "sigfpe:elastic": r"Signal 8 \(SIGFPE\)",
    "sigfpe:torchrun": r"exitcode\s*:\s*-8\b",
    "sigfpe:shell": r"Floating point exception",
    "sigfpe:name": r"SIGFPE\b",
    "import_abi:symbol": r"undefined symbol:\s*\S+",
    "import_abi:glibc": r"GLIBC_[0-9.]+'?\s+not found",
    "import_abi:glibcxx": r"GLIBCXX_[0-9.]+'?\s+not found",
    "import_abi:cxxabi": r"CXXABI_[0-9.]+'?\s+not found",
    "import_abi:wrapped": r"Failed to import transformers\.[\w.]+ because of the following error",
    "driver_too_old:old": r"NVIDIA driver on your system is too old",
    "driver_too_old:insufficient": r"CUDA driver version is insufficient",
    "unsupported_gpu:fa2": r"FlashAttention only supports Ampere GPUs or newer",
    "unsupported_gpu:kernel": r"no kernel image is available for execution on the device",
    "unsupported_gpu:sm": r"is not compatible with the current PyTorch installation",
    "oom:cuda": r"CUDA out of memory",
    "oom:error": r"OutOfMemoryError",
    "oom:cpu": r"DefaultCPUAllocator: can't allocate memory",
    "ddp_ready_twice:once": r"Expected\s+to\s+mark\s+a\s+variable\s+ready\s+only\s+once",
    "ddp_ready_twice:twice": r"marked\s+as\s+ready\s+twice",
    "grad_lost:element0": r"element\s+0\s+of\s+tensors\s+does\s+not\s+require\s+grad",
    "grad_lost:none_output": r"none\s+of\s+output\s+has\s+requires_grad=True",
    "grad_lost:none_inputs": r"None\s+of\s+the\s+inputs\s+have\s+requires_grad=True",
    "nan_loss:probability": r"probability tensor contains either `?inf`?, `?nan`? or element < 0",
    "nan_loss:dof": r"std\(\): degrees of freedom is <= 0",
    # one token id repeated: a printed list, maybe wrapped over lines that carry rank/log prefixes or
    # are interleaved with another rank's \r-redrawn progress bar
    "garbled_output:repeat": r", (?P<tok>\d\d+)(?:,(?:\s|\[[^\]\n]{0,80}\]|:|\r[^\n]*)*(?P=tok)\b){15,}",
    "garbled_output:bangs": r"!!!!!!!!!!!!!!!!!!!!!!!!",
    "nccl_error:watchdog": r"Watchdog caught collective operation timeout",
    "nccl_error:error": r"NCCL error in:",
    "nccl_error:unhandled": r"ncclUnhandledCudaError",
    "nccl_error:system": r"ncclSystemError",
    "nccl_error:internal": r"ncclInternalError",
    "nccl_error:aborted": r"NCCL communicator was aborted",
    "crash:exitcode": r"exitcode\s*:\s*-(?:4|6|7|9|11)\b",
    "crash:elastic": r"Signal (?:4|6|7|9|11) \(SIG\w+\) received",
    "crash:segv": r"Segmentation fault",
    "crash:bus": r"Bus error",
    "error:traceback": r"Traceback \(most recent call last\)",
}

# One pattern per signature, each opening with a literal: the regex engine then skips ahead with a
# fast literal search. (One big alternation is tried at every byte: 2 MiB/s instead of hundreds.)
_SIGS = [(name, re.compile(p.encode())) for name, p in SIGNATURES.items()]

_SEP = rb"['\"]?\s*(?:[:=]\s*|\s+)['\"]?"
_METRIC = re.compile(rb"(loss|grad_norm|reward_std|frac_reward_zero_std)" + _SEP + rb"(-?(?:[nN]a[nN]|[iI]nf|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?))\b")
_NONFINITE = [re.compile(key + _SEP + rb"-?(?:[nN]a[nN]|[iI]nf)\b") for key in (rb"loss", rb"grad_norm")]


@dataclass(frozen=True)
class Hit:
    """Where a signature or metric was seen: 1-based line number and the cleaned line."""

    line_no: int
    line: str

    def quote(self) -> str:
        """`line 12: <text>` for evidence."""
        return f"line {self.line_no}: {self.line}"


@dataclass
class LogScan:
    """What a log showed: first hit per signature (and counts), early metric values, first non-finite metric."""

    hits: dict[str, Hit] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    metrics: dict[str, list[tuple[float, Hit]]] = field(default_factory=dict)
    nonfinite: Hit | None = None
    lines: int = 0
    size: int = 0

    def first(self, outcome: str) -> Hit | None:
        """The hit of the most decisive variant of an outcome's signatures that the log shows."""
        for name in SIGNATURES:
            if name.split(":")[0] == outcome and name in self.hits:
                return self.hits[name]
        return None

    def values(self, key: str) -> list[float]:
        """The first values of a metric in the order they were logged."""
        return [v for v, _ in self.metrics.get(key, [])]


def _is_key(buf: bytes, start: int) -> bool:
    """A metric name stands alone (`'loss'`, ` loss`), not inside another (`val_loss`, `loss/x`)."""
    before = buf[start - 1 : start]
    return not before or not (before.isalnum() or before in (b"_", b"/"))


def _line_at(buf: bytes, start: int, end: int) -> str:
    """The text of the line (or \\r-segment) around buf[start:end], cleaned and shortened."""
    lo = max(buf.rfind(b"\n", 0, start), buf.rfind(b"\r", 0, start)) + 1
    hi_n, hi_r = buf.find(b"\n", end), buf.find(b"\r", end)
    his = [h for h in (hi_n, hi_r) if h != -1]
    hi = min(his) if his else len(buf)
    lo = max(lo, start - MAX_LINE)
    hi = min(hi, end + MAX_LINE)
    text = buf[lo:hi].decode("utf-8", "replace").strip()
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 1] + "…"


class _Scanner:
    def __init__(self) -> None:
        self.scan = LogScan()
        self.metrics_done = False

    def feed(self, buf: bytes, base_line: int) -> None:
        scan = self.scan

        def hit(m: re.Match[bytes]) -> Hit:
            return Hit(base_line + buf.count(b"\n", 0, m.start()) + 1, _line_at(buf, m.start(), m.end()))

        for name, pattern in _SIGS:
            for m in pattern.finditer(buf):
                scan.counts[name] = scan.counts.get(name, 0) + 1
                if name not in scan.hits:
                    scan.hits[name] = hit(m)
        if scan.nonfinite is None:
            found = [m for m in (p.search(buf) for p in _NONFINITE) if m is not None and _is_key(buf, m.start())]
            if found:
                scan.nonfinite = hit(min(found, key=lambda m: m.start()))
        if not self.metrics_done:
            for m in _METRIC.finditer(buf):
                if not _is_key(buf, m.start()):
                    continue
                kept = scan.metrics.setdefault(m.group(1).decode(), [])
                kept.append((float(m.group(2)), hit(m)))
                if len(kept) >= METRIC_VALUES_KEPT:  # the early steps are what the rules judge
                    self.metrics_done = True
                    break


def scan_stream(stream: BinaryIO) -> LogScan:
    """Scan a binary stream chunk by chunk; memory stays near 2 * CHUNK + MAX_LINE whatever the size.

    A chunk ends at a line end (so a line is never split), unless one line outgrows every bound."""
    scanner = _Scanner()
    buf = b""
    line_no = 0
    while True:
        block = stream.read(CHUNK)
        scanner.scan.size += len(block)
        buf += block
        if block and len(buf) < CHUNK:
            continue
        if not block:
            cut = len(buf)
        else:
            cut = buf.rfind(b"\n") + 1
            if cut == 0:
                if len(buf) < CHUNK + MAX_LINE:
                    continue  # no line end yet: wait for more, within bounds
                cut = len(buf)  # one enormous line: search it as it is
        whole, buf = _ANSI.sub(b"", buf[:cut]), buf[cut:]
        if whole:
            scanner.feed(whole, line_no)
            line_no += whole.count(b"\n") + (0 if whole.endswith(b"\n") or block else 1)
        if not block:
            break
    scanner.scan.lines = line_no
    return scanner.scan


def scan_text(text: str | bytes) -> LogScan:
    """Scan an in-memory log (tests, probe error messages)."""
    import io

    data = text.encode("utf-8", "replace") if isinstance(text, str) else text
    return scan_stream(io.BytesIO(data))
