"""The error tables of the CUDA runtime, the CUDA driver, NCCL, cuBLAS and cuDNN: every code with its number, its enum
name and the message the library itself prints for it, and the outcome each one means.

The numbers, names and messages are read from the libraries (their own `cudaGetErrorName`/`cudaGetErrorString`,
`cuGetErrorName`/`cuGetErrorString`, `ncclGetErrorString` with the enum of `nccl.h`, `cublasGetStatusName`/
`cublasGetStatusString`, `cudnnGetErrorString`) by `python -m envmatrix.facts.errorcodes --read` on a machine that has
them, merged over releases into `errorcodes.json` with `--merge`: nothing here is typed per example. Which outcome a
code means is this module's judgement (`OUTCOMES`), one line per code that is not a plain `error`.

The classifier's code patterns are generated from the table (`patterns`), so a log that prints a code as its number,
its enum name or its message, in any wrapper's sentence, is read as that code.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import re
import site
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("errorcodes.json")

#: A family's name as users know it, for evidence and remedies.
FAMILIES = {"cuda_runtime": "CUDA runtime", "cuda_driver": "CUDA driver", "nccl": "NCCL", "cublas": "cuBLAS", "cudnn": "cuDNN"}

# fmt: off
#: What a code means for a training run, where it is more than an `error`. Device faults (a kernel that touched memory it
#: must not, a hardware error, a device-side assertion) are `crash`: the CUDA context is lost, as when a process dies of a
#: signal. A kernel image missing for the GPU's architecture is `unsupported_gpu`; a driver older than the runtime or the
#: PTX needs is `driver_too_old`; every NCCL failure is `nccl_error` (the family's default below).
OUTCOMES: dict[str, str] = {
    "cudaErrorMemoryAllocation": "oom", "CUDA_ERROR_OUT_OF_MEMORY": "oom",
    "CUBLAS_STATUS_ALLOC_FAILED": "oom", "CUDNN_STATUS_ALLOC_FAILED": "oom",
    "cudaErrorInsufficientDriver": "driver_too_old", "cudaErrorCallRequiresNewerDriver": "driver_too_old",
    "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER": "driver_too_old", "cudaErrorSystemDriverMismatch": "driver_too_old",
    "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH": "driver_too_old", "cudaErrorCompatNotSupportedOnDevice": "driver_too_old",
    "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE": "driver_too_old", "cudaErrorUnsupportedPtxVersion": "driver_too_old",
    "CUDA_ERROR_UNSUPPORTED_PTX_VERSION": "driver_too_old", "cudaErrorStubLibrary": "driver_too_old",
    "CUDA_ERROR_STUB_LIBRARY": "driver_too_old",
    "cudaErrorNoKernelImageForDevice": "unsupported_gpu", "CUDA_ERROR_NO_BINARY_FOR_GPU": "unsupported_gpu",
    "cudaErrorInvalidDeviceFunction": "unsupported_gpu", "cudaErrorInvalidKernelImage": "unsupported_gpu",
    "CUDA_ERROR_INVALID_IMAGE": "unsupported_gpu", "cudaErrorUnsupportedLimit": "unsupported_gpu",
    "CUDA_ERROR_UNSUPPORTED_LIMIT": "unsupported_gpu", "CUBLAS_STATUS_ARCH_MISMATCH": "unsupported_gpu",
    "CUBLAS_STATUS_NOT_SUPPORTED": "unsupported_gpu", "CUDNN_STATUS_ARCH_MISMATCH": "unsupported_gpu",
    "cudaErrorIllegalAddress": "crash", "CUDA_ERROR_ILLEGAL_ADDRESS": "crash",
    "cudaErrorLaunchFailure": "crash", "CUDA_ERROR_LAUNCH_FAILED": "crash", "cudaErrorPriorLaunchFailure": "crash",
    "cudaErrorMisalignedAddress": "crash", "CUDA_ERROR_MISALIGNED_ADDRESS": "crash",
    "cudaErrorIllegalInstruction": "crash", "CUDA_ERROR_ILLEGAL_INSTRUCTION": "crash",
    "cudaErrorInvalidAddressSpace": "crash", "CUDA_ERROR_INVALID_ADDRESS_SPACE": "crash",
    "cudaErrorInvalidPc": "crash", "CUDA_ERROR_INVALID_PC": "crash",
    "cudaErrorHardwareStackError": "crash", "CUDA_ERROR_HARDWARE_STACK_ERROR": "crash",
    "cudaErrorECCUncorrectable": "crash", "CUDA_ERROR_ECC_UNCORRECTABLE": "crash",
    "cudaErrorNvlinkUncorrectable": "crash", "CUDA_ERROR_NVLINK_UNCORRECTABLE": "crash",
    "cudaErrorContained": "crash", "CUDA_ERROR_CONTAINED": "crash",
    "cudaErrorAssert": "crash", "CUDA_ERROR_ASSERT": "crash",
    "cudaErrorLaunchTimeout": "crash", "CUDA_ERROR_LAUNCH_TIMEOUT": "crash",
}
#: A family whose every failure means one outcome.
FAMILY_OUTCOME = {"nccl": "nccl_error"}
#: What a user does about a code, where the outcome's own remedy says less (by enum name).
REMEDIES: dict[str, str] = {
    "cudaErrorAssert": "a device-side assertion fired: almost always an index out of range in a kernel (token ids beyond the "
                       "embedding's vocabulary, labels beyond the classes, a padding id of -1); rerun with CUDA_LAUNCH_BLOCKING=1 to see the op",
    "cudaErrorECCUncorrectable": "the GPU reported an uncorrectable memory (ECC) error: a hardware fault; drain the node and "
                                 "check it (nvidia-smi -q -d ECC), then run again elsewhere",
    "cudaErrorInitializationError": "CUDA could not initialise: a process forked after CUDA was initialised (use the spawn start "
                                    "method), or a driver/device problem (nvidia-smi shows whether the driver sees the GPU)",
    "cudaErrorNoDevice": "no GPU is visible to the process: check CUDA_VISIBLE_DEVICES, the container's --gpus option, and nvidia-smi",
    "cudaErrorDevicesUnavailable": "the GPU is busy or in exclusive mode for another process: free it or choose another "
                                   "(nvidia-smi shows the compute mode and the processes)",
}
# fmt: on
#: The same advice under the driver API's name, so either spelling finds it.
REMEDIES.update(
    {
        "CUDA_ERROR_ASSERT": REMEDIES["cudaErrorAssert"],
        "CUDA_ERROR_ECC_UNCORRECTABLE": REMEDIES["cudaErrorECCUncorrectable"],
        "CUDA_ERROR_NOT_INITIALIZED": REMEDIES["cudaErrorInitializationError"],
        "CUDA_ERROR_NO_DEVICE": REMEDIES["cudaErrorNoDevice"],
        "CUDA_ERROR_DEVICE_UNAVAILABLE": REMEDIES["cudaErrorDevicesUnavailable"],
    }
)  # fmt: skip


@dataclass(frozen=True)
class Code:
    """One code of one library: its number, enum name, every message its releases print, and what it means."""

    family: str
    number: int
    name: str
    messages: tuple[str, ...]

    @property
    def outcome(self) -> str:
        return OUTCOMES.get(self.name) or FAMILY_OUTCOME.get(self.family, "error")

    @property
    def remedy(self) -> str | None:
        return REMEDIES.get(self.name)

    def describe(self) -> str:
        """`CUDA runtime 700 cudaErrorIllegalAddress (an illegal memory access was encountered)`."""
        said = f" ({self.messages[0]})" if self.messages else ""
        return f"{FAMILIES[self.family]} {self.number} {self.name}{said}"


@cache
def _document() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DATA.read_text(encoding="utf-8"))
    return data


@cache
def table() -> tuple[Code, ...]:
    """Every failure code of every family (success codes left out)."""
    doc = _document()
    return tuple(Code(family, int(n), str(name), tuple(msgs)) for family in FAMILIES for n, name, msgs in doc.get(family, []) if int(n) != 0)


def sources() -> dict[str, str]:
    """Where each family's table was read (libraries, releases, date)."""
    return dict(_document()["sources"])


@cache
def _by_name() -> dict[str, Code]:
    return {c.name: c for c in table()}


@cache
def _by_message() -> dict[str, dict[str, Code]]:
    out: dict[str, dict[str, Code]] = {}
    for code in table():
        for message in code.messages:
            out.setdefault(code.family, {}).setdefault(_norm(message), code)
    return out


def by_name(name: str) -> Code | None:
    return _by_name().get(name)


def by_message(family: str, message: str) -> Code | None:
    """The code whose message this is (case and trailing punctuation aside); CUDA's runtime and driver share messages."""
    return _by_message().get(family, {}).get(_norm(message))


def by_number(family: str, number: int) -> Code | None:
    return next((c for c in table() if c.family == family and c.number == number), None)


def _norm(message: str) -> str:
    return message.strip().rstrip(".").lower()


def _alternation(texts: Iterable[str]) -> str:
    """An RE2 alternation of literal texts, longest first (so a message never stops at a shorter one inside it)."""
    return "|".join(re.escape(t) for t in sorted(set(texts), key=lambda t: (-len(t), t)))


#: How wrappers print a CUDA message: torch's `CUDA error: <msg>` (and c10's `CUDA warning: <msg>` from a destructor),
#: the old `cuda runtime error (2) : <msg>`, CTranslate2's `CUDA failed with error <msg>`, `CUDA driver error: <msg>`,
#: NCCL's `Cuda failure 700 '<msg>'` (older NCCL: `Cuda failure '<msg>'`: a CUDA call NCCL made failed, so the code is
#: CUDA's), and a bare `Error 803: <msg>` (torch's device-count warning). `_CUDA_SAID` is the wrappers' words, shared with
#: TRIGGER so that a line the scanner stops at is one `find` reads.
_CUDA_SAID = r"cuda(?:\s+runtime|\s+driver)?\s+(?:error|warning|failed\s+with\s+error|failure)"
_CUDA_CONTEXT = (
    r"(?i:" + _CUDA_SAID + r"|\berror(?:\s+|=)\d{1,4})"
    r"\s*(?:\(\d{1,4}\)\s*|\d{1,4}\s+|\([^)\n]{1,300}:\d+\)\s*|(?:in|at)\s+[^\s:()]{1,300}(?:\(\d+\)|:\d+)\s*)?[:=]?\s*['‘]?"
)
#: NCCL's strings come after `NCCL error`, `NCCL Error 2:`, torch's `NCCL error in: <file>:<line>, ` and the like.
_NCCL_CONTEXT = r"(?i:nccl)[^\n]{0,160}?"


#: A kernel's own assertion, as CUDA's device-side `assert` prints it before the runtime reports cudaErrorAssert (the
#: process usually dies before any exception is printed): `Indexing.cu:1422: indexSelectLargeIndex: block: [31,0,0],
#: thread: [0,0,0] Assertion `srcIndex < srcSelectDimSize` failed.` The format is the device runtime's, whatever the kernel.
_DEVICE_ASSERT = r"block:\s*\[\d+,\s*\d+,\s*\d+\],\s*thread:\s*\[\d+,\s*\d+,\s*\d+\]\s*Assertion\b"
#: The enum name each printed form without a number or name stands for.
_FORMS = {"device_assert": "cudaErrorAssert"}

#: Where a code may be printed (torch's old `THCudaCheck FAIL file=… line=271 error=4 : unspecified launch failure` too;
#: a small pattern for a log scanner's single pass, RE2 syntax): an enum name of any family,
#: the words a wrapper puts before a message or a number, or a kernel's assertion. `find` then reads the codes from that line.
TRIGGER = (
    r"\b(?:cudaError[A-Z]\w*|CUDA_ERROR_[A-Z_]+|nccl[A-Z]\w*|CUBLAS_STATUS_[A-Z_]+|CUDNN_STATUS_[A-Z_]+)\b"
    r"|(?i:" + _CUDA_SAID + r"|nccl\s+error|\berror(?:\s+|=)\d{1,4}\s*:|\bcode\s*=\s*\d)"
    r"|" + _DEVICE_ASSERT
)
#: How much of a text `find` searches.
FIND_CHARS = 4000


#: How long a CUDA message must be to be read without a wrapper's words before it: one this long is CUDA's own sentence
#: however it is quoted (`… tile_matmul_kernels.cu(183): an illegal memory access was encountered`, or in a user's prose),
#: where a short one (`out of memory`, `invalid argument`) is any library's.
BARE_CHARS = 32


def _bare() -> list[str]:
    return [m for c in table() if c.family in ("cuda_runtime", "cuda_driver") for m in c.messages if len(m) >= BARE_CHARS]


@cache
def trigger() -> str:
    """TRIGGER and CUDA's long messages on their own (RE2): where the scanner looks for a code."""
    return TRIGGER + r"|(?i:" + _alternation(_bare()) + r")"


@cache
def patterns() -> dict[str, str]:
    """Patterns generated from the table, each with a group VALUE that `lookup` resolves: every enum name; each family's
    messages after the words its wrappers print; numbered forms (`code=700(...)`, `CUDA error 700`); a kernel's assertion."""
    names = [c.name for c in table()]
    cuda = [m for c in table() if c.family in ("cuda_runtime", "cuda_driver") for m in c.messages if len(m) >= 12]
    nccl = [m.split(" (run with")[0] for c in table() if c.family == "nccl" for m in c.messages]
    return {
        "name": r"\b(?P<VALUE>" + _alternation(names) + r")\b",
        "cuda_message": _CUDA_CONTEXT + r"(?P<VALUE>(?i:" + _alternation(cuda) + r"))",
        "nccl_message": _NCCL_CONTEXT + r"(?P<VALUE>(?i:" + _alternation(nccl) + r"))",
        "cuda_number": r"(?i:cuda\s+(?:error|failure)\s*[:=]?\s*|\bcode\s*=\s*)(?P<VALUE>\d{1,4})\b",
        "cuda_bare": r"(?P<VALUE>(?i:" + _alternation(_bare()) + r"))",
        "device_assert": r"(?P<VALUE>" + _DEVICE_ASSERT + r")",
    }


def lookup(kind: str, value: str) -> Code | None:
    """The code a `patterns()` match names: `kind` is the pattern's name, `value` its VALUE group."""
    if kind == "name":
        return by_name(value)
    if kind in ("cuda_message", "cuda_bare"):
        return by_message("cuda_runtime", value) or by_message("cuda_driver", value)
    if kind == "nccl_message":
        return next((c for c in table() if c.family == "nccl" and any(_norm(m).startswith(_norm(value)) for m in c.messages)), None)
    if kind == "cuda_number":
        return by_number("cuda_runtime", int(value))
    if kind in _FORMS:
        return by_name(_FORMS[kind])
    return None


_NCCL_SAID = re.compile(r"(?i:\bnccl\b)")


@cache
def _compiled() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((kind, re.compile(pattern)) for kind, pattern in patterns().items())


def find(text: str) -> list[Code]:
    """The codes a text names (a message or a log line: short, so Python's re serves), in the order the forms are tried."""
    found: list[Code] = []
    for kind, pattern in _compiled():
        for m in pattern.finditer(text[:FIND_CHARS]):
            if kind == "cuda_bare" and _NCCL_SAID.search(text, text.rfind("\n", 0, m.start()) + 1, m.start()):
                continue  # a CUDA message alone on a line NCCL speaks (its `Cuda failure '…'` is read by its words above)
            code = lookup(kind, m.group("VALUE"))
            if code is not None and code not in found:
                found.append(code)
    return found


# ---- reading the tables from the libraries ------------------------------------------------------------------------

_ROOTS = ("/usr/local/cuda", "/usr/local/nvidia", "/usr/lib/x86_64-linux-gnu", "/usr/lib64")


def _find(pattern: str) -> str | None:
    for root in (*site.getsitepackages(), *_ROOTS):
        hits = sorted(glob.glob(os.path.join(root, "**", pattern), recursive=True))
        if hits:
            return hits[0]
    return None


def _strings(fn: Any, codes: Iterable[int], unknown: Iterable[str]) -> list[tuple[int, str]]:
    fn.restype = ctypes.c_char_p
    bad = set(unknown)
    out = []
    for code in codes:
        text = fn(code)
        if text and text.decode() not in bad:
            out.append((code, text.decode()))
    return out


def read_libraries() -> dict[str, Any]:
    """This machine's tables, read from the libraries it has (a family whose library is missing is left out)."""
    dump: dict[str, Any] = {"versions": {}}
    if path := _find("libcudart.so*"):
        rt = ctypes.CDLL(path)
        version = ctypes.c_int()
        rt.cudaRuntimeGetVersion(ctypes.byref(version))
        names = dict(_strings(rt.cudaGetErrorName, range(1200), ("unrecognized error code",)))
        messages = dict(_strings(rt.cudaGetErrorString, names, ()))
        dump["cuda_runtime"] = [[n, names[n], [messages[n]]] for n in names if names[n].startswith("cuda")]
        dump["versions"]["cuda_runtime"] = f"{Path(path).name} {version.value}"
    try:
        drv = ctypes.CDLL("libcuda.so.1")
    except OSError:
        drv = None
    if drv is not None:
        rows = []
        for code in range(1200):
            name, text = ctypes.c_char_p(), ctypes.c_char_p()
            if drv.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
                drv.cuGetErrorString(code, ctypes.byref(text))
                rows.append([code, name.value.decode(), [text.value.decode()] if text.value else []])
        version = ctypes.c_int()
        drv.cuDriverGetVersion(ctypes.byref(version))
        dump["cuda_driver"], dump["versions"]["cuda_driver"] = rows, f"libcuda.so.1 {version.value}"
    if (path := _find("libnccl.so*")) and (header := _find("nccl.h")):
        nccl = ctypes.CDLL(path)
        enum = re.search(r"typedef\s+enum\s*\{(.*?)\}\s*ncclResult_t", Path(header).read_text(errors="replace"), re.S)
        names = {int(v): k for k, v in re.findall(r"(nccl\w+)\s*=\s*(\d+)", enum.group(1) if enum else "") if k != "ncclNumResults"}
        texts = dict(_strings(nccl.ncclGetErrorString, names, ("unknown result code",)))
        version = ctypes.c_int()
        nccl.ncclGetVersion(ctypes.byref(version))
        dump["nccl"] = [[n, names[n], [texts[n]]] for n in sorted(names) if n in texts]
        dump["versions"]["nccl"] = f"{Path(path).name} {version.value}"
    if path := _find("libcublas.so.*"):
        cb = ctypes.CDLL(path)
        names = dict(_strings(cb.cublasGetStatusName, range(64), ("unrecognized status",)))
        texts = dict(_strings(cb.cublasGetStatusString, names, ()))
        dump["cublas"] = [[n, names[n], [texts[n]]] for n in sorted(names)]
        dump["versions"]["cublas"] = Path(path).name
    if (path := _find("libcudnn.so*")) and (header := _find("cudnn_graph.h") or _find("cudnn_ops_infer.h") or _find("cudnn.h")):
        dn = ctypes.CDLL(path)
        names = {int(v): k for k, v in re.findall(r"(CUDNN_STATUS_\w+)\s*=\s*(\d+)", Path(header).read_text(errors="replace"))}
        texts = dict(_strings(dn.cudnnGetErrorString, names, ()))
        dump["cudnn"] = [[n, names[n], [texts[n]]] for n in sorted(names) if n in texts]
        dump["versions"]["cudnn"] = Path(path).name
    return dump


def merge(dumps: Iterable[dict[str, Any]], read_on: str) -> dict[str, Any]:
    """One table per family from several releases' dumps: a code keeps every message any release prints for it."""
    merged: dict[str, dict[int, tuple[str, list[str]]]] = {}
    seen: dict[str, list[str]] = {}
    for dump in dumps:
        for family in FAMILIES:
            for number, name, messages in dump.get(family, []):
                _, known = merged.setdefault(family, {}).setdefault(int(number), (name, []))
                known.extend(m for m in messages if m not in known)
            if family in dump.get("versions", {}):
                seen.setdefault(family, []).append(dump["versions"][family])
    functions = {"cuda_runtime": "cudaGetErrorName/cudaGetErrorString", "cuda_driver": "cuGetErrorName/cuGetErrorString",
                 "nccl": "the ncclResult_t enum of nccl.h and ncclGetErrorString", "cublas": "cublasGetStatusName/cublasGetStatusString",
                 "cudnn": "the cudnnStatus_t enum of its header and cudnnGetErrorString"}  # fmt: skip
    out: dict[str, Any] = {
        "sources": {f: f"{functions[f]} of {', '.join(seen[f])} (read {read_on})" for f in merged},
    }
    for family, rows in merged.items():
        out[family] = [[n, name, msgs] for n, (name, msgs) in sorted(rows.items())]
    return out


def main(argv: list[str] | None = None) -> int:
    """`--read`: print this machine's tables as JSON; `--merge DUMP... --date D`: write errorcodes.json from dumps."""
    p = argparse.ArgumentParser(prog="python -m envmatrix.facts.errorcodes", description=main.__doc__)
    p.add_argument("--read", action="store_true")
    p.add_argument("--merge", nargs="+", type=Path, default=[])
    p.add_argument("--date", default="")
    args = p.parse_args(argv)
    if args.read:
        json.dump(read_libraries(), sys.stdout, indent=1)
        return 0
    merged = merge((json.loads(path.read_text()) for path in args.merge), args.date)
    DATA.write_text(_dumps(merged), encoding="utf-8")
    return 0


def _dumps(merged: dict[str, Any]) -> str:
    """The table as JSON with one code a line, so a refresh reads as a diff of codes."""
    parts = [f'"sources": {json.dumps(merged["sources"], indent=1, ensure_ascii=False)}']
    for family in FAMILIES:
        if family in merged:
            rows = ",\n".join(json.dumps(row, ensure_ascii=False) for row in merged[family])
            parts.append(f'"{family}": [\n{rows}\n]')
    return "{\n" + ",\n".join(parts) + "\n}\n"


if __name__ == "__main__":
    sys.exit(main())
