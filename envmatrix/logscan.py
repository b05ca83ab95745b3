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
    "sigfpe:name": r"\bSIGFPE\b",
    "import_abi:symbol": r"undefined symbol:\s*\S+",
    "import_abi:glibc": r"`?(?:GLIBC|GLIBCXX|CXXABI)_[0-9.]+'?\s+not found",
    "import_abi:wrapped": r"Failed to import transformers\.[\w.]+ because of the following error",
    "driver_too_old:msg": r"NVIDIA driver on your system is too old|CUDA driver version is insufficient",
    "unsupported_gpu:fa2": r"FlashAttention only supports Ampere GPUs or newer",
    "unsupported_gpu:kernel": r"no kernel image is available for execution on the device",
    "unsupported_gpu:sm": r"sm_\d+ is not compatible with the current PyTorch installation",
    "oom:cuda": r"CUDA out of memory|OutOfMemoryError|DefaultCPUAllocator: can't allocate memory",
    "ddp_ready_twice:once": r"Expected\s+to\s+mark\s+a\s+variable\s+ready\s+only\s+once",
    "ddp_ready_twice:twice": r"marked\s+as\s+ready\s+twice",
    "grad_lost:element0": r"element\s+0\s+of\s+tensors\s+does\s+not\s+require\s+grad",
    "grad_lost:none_output": r"none\s+of\s+output\s+has\s+requires_grad=True",
    "grad_lost:none_inputs": r"None\s+of\s+the\s+inputs\s+have\s+requires_grad=True",
    "nan_loss:probability": r"probability tensor contains either `?inf`?, `?nan`? or element < 0",
    "nan_loss:dof": r"std\(\): degrees of freedom is <= 0",
    "garbled_output:repeat": r"\b(?P<tok>\d{2,})(?:,\s*(?P=tok)\b){15,}",
    "garbled_output:bangs": r"!{24,}",
    "nccl_error:watchdog": r"Watchdog caught collective operation timeout",
    "nccl_error:error": r"NCCL error in:|ncclUnhandledCudaError|ncclSystemError|ncclInternalError|NCCL communicator was aborted",
    "crash:signal": r"exitcode\s*:\s*-(?:4|6|7|9|11)\b|Segmentation fault|Bus error|Signal (?:4|6|7|9|11) \(SIG\w+\) received",
    "error:traceback": r"Traceback \(most recent call last\)",
}

_SIG = re.compile("|".join(f"(?P<g{i}>{p})" for i, p in enumerate(SIGNATURES.values())).encode())
_SIG_NAMES = list(SIGNATURES)

_NUM = rb"['\"]?\s*(?:[:=]\s*|\s+)['\"]?(-?(?:nan|inf|\d+(?:\.\d*)?(?:e[-+]?\d+)?))\b"
_METRIC = re.compile(rb"(?<![\w/])['\"]?(loss|grad_norm|reward_std|frac_reward_zero_std)" + _NUM, re.IGNORECASE)
_NONFINITE = re.compile(rb"(?<![\w/])['\"]?(loss|grad_norm)['\"]?\s*(?:[:=]\s*|\s+)['\"]?-?(nan|inf)\b", re.IGNORECASE)


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

    def feed(self, buf: bytes, base_line: int) -> None:
        scan = self.scan
        for m in _SIG.finditer(buf):
            name = _SIG_NAMES[int(m.lastgroup[1:]) if m.lastgroup else 0]
            scan.counts[name] = scan.counts.get(name, 0) + 1
            if name not in scan.hits:
                scan.hits[name] = Hit(base_line + buf.count(b"\n", 0, m.start()) + 1, _line_at(buf, m.start(), m.end()))
        if scan.nonfinite is None:
            m2 = _NONFINITE.search(buf)
            if m2 is not None:
                scan.nonfinite = Hit(base_line + buf.count(b"\n", 0, m2.start()) + 1, _line_at(buf, m2.start(), m2.end()))
        if sum(len(v) for v in scan.metrics.values()) < 4 * METRIC_VALUES_KEPT:
            for m3 in _METRIC.finditer(buf):
                key = m3.group(1).decode().lower()
                kept = scan.metrics.setdefault(key, [])
                if len(kept) < METRIC_VALUES_KEPT:
                    hit = Hit(base_line + buf.count(b"\n", 0, m3.start()) + 1, _line_at(buf, m3.start(), m3.end()))
                    kept.append((float(m3.group(2)), hit))


def scan_stream(stream: BinaryIO) -> LogScan:
    """Scan a binary stream chunk by chunk; memory stays near CHUNK + MAX_LINE whatever the size."""
    scanner = _Scanner()
    carry = b""
    line_no = 0
    while True:
        block = stream.read(CHUNK)
        if not block:
            break
        scanner.scan.size += len(block)
        buf = carry + block
        cut = buf.rfind(b"\n") + 1
        if cut == 0 and len(buf) < CHUNK + MAX_LINE:
            carry = buf  # no line end yet: wait for more, within bounds
            continue
        if cut == 0:
            cut = len(buf)  # one enormous line: search it as it is
        whole, carry = buf[:cut], buf[cut:]
        whole = _ANSI.sub(b"", whole)
        scanner.feed(whole, line_no)
        line_no += whole.count(b"\n")
    if carry:
        scanner.feed(_ANSI.sub(b"", carry), line_no)
        line_no += 1
    scanner.scan.lines = line_no
    return scanner.scan


def scan_text(text: str | bytes) -> LogScan:
    """Scan an in-memory log (tests, probe error messages)."""
    import io

    data = text.encode("utf-8", "replace") if isinstance(text, str) else text
    return scan_stream(io.BytesIO(data))
