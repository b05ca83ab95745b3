"""The fatbin reader on small synthetic ELF files built here byte by byte (no CUDA toolkit needed)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from envmatrix.facts import elfarch


def fatbin(entries: list[tuple[int, int]]) -> bytes:
    """A fatbin with (kind, arch) entries, each carrying a few payload bytes."""
    body = b""
    for kind, arch in entries:
        payload = b"\xab" * 24
        header = struct.pack("<HHIQII", kind, 0x0101, 64, len(payload), 0, 0) + struct.pack("<HHI", 0, 0, arch)
        header += b"\0" * (64 - len(header))
        body += header + payload
    return struct.pack("<IHHQ", elfarch.FATBIN_MAGIC, 1, 16, len(body)) + body


def elf(sections: dict[str, bytes]) -> bytes:
    """An ELF64 little-endian file whose section headers name the given sections."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in [*sections, ".shstrtab"])
    data = bytearray(b"\x7fELF\x02\x01\x01" + b"\0" * 57)
    placed: list[tuple[int, int, int]] = [(0, 0, 0)]
    offset_of_name = 1
    for name, blob in [*sections.items(), (".shstrtab", names)]:
        placed.append((offset_of_name, len(data), len(blob)))
        offset_of_name += len(name) + 1
        data += blob
    while len(data) % 8:
        data += b"\0"
    shoff = len(data)
    for i, (name_off, off, size) in enumerate(placed):
        sh_type = 0 if i == 0 else (3 if i == len(placed) - 1 else 1)
        data += struct.pack("<IIQQQQIIQQ", name_off, sh_type, 0, 0, off, size, 0, 0, 1, 0)
    struct.pack_into("<Q", data, 0x28, shoff)
    struct.pack_into("<HHH", data, 0x3A, 64, len(placed), len(placed) - 1)
    return bytes(data)


def write(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    return path


def test_reads_sass_and_ptx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")  # the pure reader, not cuobjdump
    lib = write(tmp_path, "flash_attn_2_cuda.so", elf({".text": b"\x90" * 10, ".nv_fatbin": fatbin([(2, 80), (2, 90), (1, 90)])}))
    archs = elfarch.read_archs(lib)
    assert archs.sass == {80, 90} and archs.ptx == {90}
    assert archs.describe() == "sm80 sm90 compute_90"


def test_concatenated_fatbins_with_padding() -> None:
    blob = fatbin([(2, 80)]) + b"\0" * 8 + fatbin([(2, 100)])
    assert elfarch.fatbin_archs(blob).sass == {80, 100}


def test_runs_on_rules() -> None:
    a = elfarch.GpuArchs(sass={80, 90})
    assert a.runs_on((8, 0)) and a.runs_on((8, 6)) and a.runs_on((9, 0))
    assert not a.runs_on((10, 0)) and not a.runs_on((12, 0)) and not a.runs_on((7, 5))
    assert elfarch.GpuArchs(sass={80}, ptx={90}).runs_on((10, 0))  # PTX JIT-compiles forward
    assert elfarch.GpuArchs(sass={100}).runs_on((10, 3))  # same major, higher minor


def test_unsupported_reason_names_the_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    gpu_lib = write(tmp_path, "fa.so", elf({".nv_fatbin": fatbin([(2, 80), (2, 90)])}))
    cpu_lib = write(tmp_path, "cpu.so", elf({".text": b"\x90"}))
    reason = elfarch.unsupported_reason([gpu_lib, cpu_lib], (10, 0), "B200")
    assert reason is not None and "fa.so has no kernels for B200 (sm100)" in reason and "sm80 sm90" in reason
    assert elfarch.unsupported_reason([gpu_lib, cpu_lib], (9, 0), "H100") is None
    assert elfarch.unsupported_reason([cpu_lib], (10, 0), "B200") is None


def test_not_an_elf(tmp_path: Path) -> None:
    with pytest.raises(elfarch.NotAnElf):
        elfarch.sections(b"PK\x03\x04 a zip, not a library")
    with pytest.raises(elfarch.NotAnElf):
        elfarch.sections(b"\x7fELF\x02\x01\x01" + b"\0" * 57)  # no section table


def test_real_cpu_library_has_no_fatbin(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real ELF from this machine (the interpreter's own libraries) parses and carries no GPU code."""
    import _ctypes

    monkeypatch.setenv("PATH", "")
    archs = elfarch.read_archs(Path(_ctypes.__file__))
    assert archs.sass == set() and archs.ptx == set()


def test_library_facts_and_the_per_cell_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Build time: the installed extension's architectures go into the facts; run time: checked per GPU."""
    monkeypatch.setenv("PATH", "")
    write(tmp_path, "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so", elf({".nv_fatbin": fatbin([(2, 80), (2, 90)])}))
    facts = elfarch.library_facts(tmp_path)
    assert facts == {"sass": [80, 90], "ptx": []}
    reason = elfarch.unsupported_for(facts, (10, 0), "B200")
    assert reason is not None and "no kernels for B200 (sm100)" in reason and "sm80 sm90" in reason
    assert elfarch.unsupported_for(facts, (9, 0), "H100") is None
    assert elfarch.unsupported_for(elfarch.library_facts(tmp_path / "empty"), (10, 0), "B200") is None
    assert elfarch.unsupported_for(facts, None, "cpu") is None
