"""Which GPU architectures a compiled extension carries, read from its ELF `.nv_fatbin` section.

A wheel that imports fine can still lack kernels for the GPU it runs on (community flash-attn wheels
vary; a wheel without sm_100 crashed B200 training: prime-rl #1800). The fatbin embedded by nvcc lists
each kernel image with its architecture, so the check needs no GPU and no CUDA toolkit: pure Python,
standard library, with `cuobjdump --list-elf/--list-ptx` used instead where it is installed.

Fatbin layout (as emitted by nvcc; fields little-endian): a 16-byte header (magic 0xBA55ED50, u16
version, u16 header size, u64 payload size), then entries, each with a header of u16 kind (1 PTX,
2 cubin), u16, u32 header size, u64 payload size, ..., u32 architecture (e.g. 80) at offset 28.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

FATBIN_MAGIC = 0xBA55ED50
KIND_PTX = 1
KIND_CUBIN = 2
_ELF64_LE = b"\x7fELF\x02\x01"


class NotAnElf(ValueError):
    """The file is not a 64-bit little-endian ELF object (the only kind CUDA wheels ship on x86_64/aarch64)."""


@dataclass
class GpuArchs:
    """Compiled machine code (SASS, per exact architecture) and PTX (JIT-compiled for newer GPUs)."""

    sass: set[int] = field(default_factory=set)
    ptx: set[int] = field(default_factory=set)

    def runs_on(self, cc: tuple[int, int]) -> bool:
        """Whether some image runs on a GPU of compute capability `cc`: SASS of the same major and a
        minor not above it, or PTX of an architecture not above it (the driver compiles it)."""
        arch = cc[0] * 10 + cc[1]
        return any(a // 10 == cc[0] and a <= arch for a in self.sass) or any(a <= arch for a in self.ptx)

    def describe(self) -> str:
        """`sm80 sm90 compute_90` — as cuobjdump would list them."""
        return " ".join([f"sm{a}" for a in sorted(self.sass)] + [f"compute_{a}" for a in sorted(self.ptx)]) or "none"


def sections(data: bytes) -> dict[str, bytes]:
    """The named sections of an ELF64 little-endian file."""
    if not data.startswith(_ELF64_LE):
        raise NotAnElf("not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shoff == 0 or shentsize < 64 or shoff + shnum * shentsize > len(data) or shstrndx >= shnum:
        raise NotAnElf("the ELF section header table is missing or truncated")
    headers = []
    for i in range(shnum):
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        headers.append((name, _type, offset, size))
    strtab = headers[shstrndx]
    names = data[strtab[2] : strtab[2] + strtab[3]]
    out: dict[str, bytes] = {}
    for name, sh_type, offset, size in headers:
        label = names[name : names.index(b"\0", name)].decode("ascii", "replace") if name < len(names) else ""
        out[label] = b"" if sh_type == 8 else data[offset : offset + size]  # SHT_NOBITS has no bytes in the file
    return out


def fatbin_archs(blob: bytes) -> GpuArchs:
    """Architectures listed in a `.nv_fatbin` section (one or more concatenated fatbins)."""
    found = GpuArchs()
    pos = 0
    while pos + 16 <= len(blob):
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", blob, pos)
        if magic != FATBIN_MAGIC:
            pos += 8  # fatbins are 8-byte aligned; skip padding between them
            continue
        entry, end = pos + header_size, min(pos + header_size + fat_size, len(blob))
        while entry + 32 <= end:
            kind, _unk, entry_header, payload = struct.unpack_from("<HHIQ", blob, entry)
            arch = struct.unpack_from("<I", blob, entry + 28)[0]
            if kind == KIND_CUBIN:
                found.sass.add(arch)
            elif kind == KIND_PTX:
                found.ptx.add(arch)
            if entry_header == 0:
                break
            entry += entry_header + payload
        pos = max(end, pos + 16)
    return found


def read_archs(path: Path) -> GpuArchs:
    """The GPU architectures a shared library carries; cuobjdump where installed, else the ELF itself."""
    tool = shutil.which("cuobjdump")
    if tool:
        got = _cuobjdump(tool, path)
        if got is not None:
            return got
    return fatbin_archs(sections(path.read_bytes()).get(".nv_fatbin", b""))


def _cuobjdump(tool: str, path: Path) -> GpuArchs | None:
    found = GpuArchs()
    for flag, bucket in (("--list-elf", found.sass), ("--list-ptx", found.ptx)):
        try:
            done = subprocess.run([tool, flag, str(path)], capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            return None
        bucket.update(int(m) for m in re.findall(r"\bsm_(\d+)[a-z]?\b", done.stdout))
    return found


def unsupported_reason(libraries: list[Path], cc: tuple[int, int], gpu: str) -> str | None:
    """Why these extension libraries cannot run on the GPU (`unsupported_gpu` before training), or None.
    Libraries without any fatbin (pure CPU code) are ignored; none carrying one is not a verdict."""
    carried = [(lib, read_archs(lib)) for lib in libraries]
    with_code = [(lib, a) for lib, a in carried if a.sass or a.ptx]
    missing = [(lib, a) for lib, a in with_code if not a.runs_on(cc)]
    if not missing:
        return None
    lib, archs = missing[0]
    return f"{lib.name} has no kernels for {gpu} (sm{cc[0]}{cc[1]}): it carries {archs.describe()}; use a wheel built for this GPU"


def library_facts(site_packages: Path, pattern: str = "flash_attn*_cuda*.so") -> dict[str, list[int]]:
    """The architectures of an installed package's extension libraries, for the build facts (read at build
    time, no GPU needed): {"sass": [80, 90], "ptx": [90]}; empty lists where no library or no fatbin."""
    found = GpuArchs()
    for lib in sorted(site_packages.glob(pattern)):
        try:
            archs = read_archs(lib)
        except (OSError, NotAnElf):
            continue
        found.sass |= archs.sass
        found.ptx |= archs.ptx
    return {"sass": sorted(found.sass), "ptx": sorted(found.ptx)}


def unsupported_for(facts: dict[str, list[int]] | None, cc: tuple[int, int] | None, gpu: str, what: str = "flash-attn") -> str | None:
    """Evidence for `unsupported_gpu` before training: the recorded architectures lack this GPU's; None when
    they cover it or nothing was read (no verdict without evidence)."""
    if not facts or cc is None or not (facts.get("sass") or facts.get("ptx")):
        return None
    archs = GpuArchs(set(facts.get("sass", [])), set(facts.get("ptx", [])))
    if archs.runs_on(cc):
        return None
    return f"the installed {what} has no kernels for {gpu} (sm{cc[0]}{cc[1]}): its binary carries {archs.describe()}"
