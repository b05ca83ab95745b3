"""Compatibility knowledge as data (../shared/FACTS.md §1–§4) and the skip reasons it implies.

Every fact here is a lead, not a verdict on a real run: a cell the catalog rules out is kept in the
plan as `skipped` with a reason a user can act on; a cell it allows is still tested for real.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.version import Version


@dataclass(frozen=True)
class Source:
    """Where a fact was read and when: a catalog fact without one cannot be re-checked."""

    where: str
    checked: str


BUILD_MATRIX = Source("pytorch/test-infra generate_binary_build_matrix.py; pytorch RELEASE.md (FACTS §1)", "2026-08")
RFC_2_12 = Source("pytorch/pytorch #178665 (2.12 CUDA matrix: 12.8 removed, 13.2 added), PR #182849 RELEASE.md", "2026-11-23")
RFC_2_14 = Source("pytorch/pytorch #190355, PR #194367 (2.14: 13.2 PyPI default, 13.0 stable, 12.6 legacy; Python ≤ 3.15)", "2026-11-23")
RFC_2_15 = Source("pytorch/pytorch #190385 (RFC, open: 2.15 drops CUDA 12.6) — re-check against the index with plan --resolve", "2026-11-23")


@dataclass(frozen=True)
class TorchBuilds:
    """The CUDA wheel variants one torch minor release publishes, its default PyPI build, its Pythons."""

    cuda: tuple[str, ...]
    default_cuda: str
    python: tuple[str, str]
    source: Source = BUILD_MATRIX


TORCH: dict[str, TorchBuilds] = {
    "2.4": TorchBuilds(("11.8", "12.1", "12.4"), "12.1", ("3.8", "3.12")),
    "2.5": TorchBuilds(("11.8", "12.1", "12.4"), "12.4", ("3.9", "3.12")),
    "2.6": TorchBuilds(("11.8", "12.4", "12.6"), "12.4", ("3.9", "3.13")),
    "2.7": TorchBuilds(("11.8", "12.6", "12.8"), "12.6", ("3.9", "3.13")),
    "2.8": TorchBuilds(("12.6", "12.8", "12.9"), "12.8", ("3.9", "3.13")),
    "2.9": TorchBuilds(("12.6", "12.8", "13.0"), "12.8", ("3.10", "3.14")),
    "2.10": TorchBuilds(("12.6", "12.8", "13.0"), "12.8", ("3.10", "3.14")),
    "2.11": TorchBuilds(("12.6", "12.8", "13.0"), "13.0", ("3.10", "3.14")),
    "2.12": TorchBuilds(("12.6", "13.0", "13.2"), "13.0", ("3.10", "3.14"), RFC_2_12),
    "2.13": TorchBuilds(("12.6", "13.0", "13.2"), "13.0", ("3.10", "3.14")),
    "2.14": TorchBuilds(("12.6", "13.0", "13.2"), "13.2", ("3.10", "3.15"), RFC_2_14),
    "2.15": TorchBuilds(("13.0", "13.2"), "13.2", ("3.10", "3.15"), RFC_2_15),
}

CUDA_DRIVER_SOURCE = Source("NVIDIA CUDA Toolkit release notes, minor-version compatibility table (FACTS §1)", "2026-11-23")
#: The lowest Linux driver each CUDA major runs on (minor-version compatibility): older drivers fail
#: with "The NVIDIA driver on your system is too old".
CUDA_MIN_DRIVER: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}

CUDA_ARCH_SOURCE = Source("pytorch RELEASE.md CUDA support matrix (PR #182849); RFC #190385; NVIDIA CUDA 13.0 release notes", "2026-11-23")
#: CUDA 13 dropped offline compilation for every architecture below Turing (sm_75): Maxwell, Pascal, Volta.
CUDA13_MIN_CC = (7, 5)

CUDA_IMAGE_SOURCE = Source(
    "nvidia/cuda image tags: <full version>-<flavour>-ubuntu22.04, runtime vs cudnn-devel (FACTS §11); 13.2.0 follows the naming and was"
    " not checked against the registry (none reachable here)",
    "2026-11-24",
)
#: The nvidia/cuda image version for each CUDA minor the torch builds above use.
CUDA_IMAGE_VERSIONS: dict[str, str] = {
    "11.8": "11.8.0", "12.1": "12.1.1", "12.4": "12.4.1", "12.6": "12.6.3", "12.8": "12.8.1", "12.9": "12.9.1", "13.0": "13.0.1", "13.2": "13.2.0",
}  # fmt: skip
#: The CPU cells' base: made from Debian's packages (dockerfiles/debian-base.sh), no registry needed.
CPU_BASE_IMAGE = "envmatrix-base:bookworm"
CPU_BASE_OS = "debian12"

DISTRIBUTION_SOURCE = Source(
    "packages.ubuntu.com: jammy (22.04) python3.10 (main) and python3.11 (universe), noble (24.04) python3.12; packages.debian.org:"
    " bookworm python3.11 (debian-base.sh installs it); nvidia/cuda tags on ubuntu24.04 from CUDA 12.6 on (12.6.3, 12.8.1, 13.0.x)",
    "2026-11-25",
)
#: The Pythons each base image's distribution ships as packages (`python3.X`, `python3.X-venv`, `-dev`).
#: Not ubuntu22.04's python3.11: jammy-updates carries 3.11.0~rc1, a pre-release on which torch's dynamo fails at import
#: ("Duplicate dispatch rule for <built-in function intern>", seen in the GPU rehearsal 2026-11-28): uv gives 3.11 there.
DISTRIBUTION_PYTHONS: dict[str, tuple[str, ...]] = {"ubuntu22.04": ("3.10",), "ubuntu24.04": ("3.12",), CPU_BASE_OS: ("3.11",)}
#: The first CUDA version nvidia/cuda publishes on ubuntu24.04 (before it: ubuntu22.04 only).
UBUNTU_2404_FROM_CUDA = "12.6"
#: How an image gets the profile's Python (dockerfiles/steps/python.sh): the distribution's package, or a
#: uv-managed CPython (uv from PyPI; the interpreter from python-build-standalone's releases or a mirror).
PYTHON_FROM_DISTRIBUTION = "distribution"
PYTHON_FROM_UV = "uv"


@dataclass(frozen=True)
class BaseImage:
    """The probe image's base, its distribution, and how the profile's Python gets into it."""

    ref: str
    os: str
    python_from: str


def image_systems(cuda: str) -> tuple[str, ...]:
    """The distributions nvidia/cuda publishes this CUDA version on, newest last (the CPU base: Debian's)."""
    if cuda == "none":
        return (CPU_BASE_OS,)
    return ("ubuntu22.04", "ubuntu24.04") if Version(cuda) >= Version(UBUNTU_2404_FROM_CUDA) else ("ubuntu22.04",)


def base_image_for(cuda: str, python: str, *, toolkit: bool) -> BaseImage | None:
    """The base for a CUDA build and Python: the first distribution that ships this Python as a package, else
    the newest with a uv-managed CPython; a runtime image (pip's torch wheels bring their own CUDA libraries),
    or a cuDNN devel image with the toolkit where something is compiled (flash-attn from source). None for a
    CUDA version the catalog has no image for."""
    systems = image_systems(cuda)
    shipping = [os_ for os_ in systems if python in DISTRIBUTION_PYTHONS[os_]]
    os_name, how = (shipping[0], PYTHON_FROM_DISTRIBUTION) if shipping else (systems[-1], PYTHON_FROM_UV)
    if cuda == "none":
        return BaseImage(CPU_BASE_IMAGE, os_name, how)
    version = CUDA_IMAGE_VERSIONS.get(cuda)
    if version is None:
        return None
    return BaseImage(f"nvidia/cuda:{version}-{'cudnn-devel' if toolkit else 'runtime'}-{os_name}", os_name, how)


def base_image(cuda: str, *, toolkit: bool, python: str = "3.10") -> str | None:
    """The base image's reference (base_image_for)."""
    found = base_image_for(cuda, python, toolkit=toolkit)
    return found.ref if found else None


#: torch 2.7 is the first release whose pip wheels all use the CXX11 ABI (manylinux_2_28).
CXX11_ABI_FROM = Version("2.7")
CXX11_ABI_SOURCE = Source(
    "pytorch/pytorch PR #142064 (2.6: cxx11-abi for the Linux CUDA 12.6 builds only; malfet in #143962: 'only cuda-12.6"
    " binaries'); #123649 (manylinux_2_28 and the CXX11 ABI for every build from 2.7); FACTS §1",
    "2026-11-28",
)
#: Earlier releases whose builds of these CUDA versions already use the CXX11 ABI (torch 2.6.0+cu126).
CXX11_ABI_BUILDS: dict[str, tuple[str, ...]] = {"2.6": ("12.6",)}

CUBLAS_SOURCE = Source(
    "the torch wheels' Requires-Dist (pytorch .github/scripts/generate_binary_build_matrix.py, PYTORCH_EXTRA_INSTALL_REQUIREMENTS;"
    " FACTS §13): cu121 builds pin nvidia-cublas-cu12==12.1.3.1 (seen for torch 2.4.1), cu124 12.4.5.8 (PyPI's torch 2.6.0),"
    " cu126 12.6.4.1 (torch 2.7.1+cu126); a record's freeze says what was installed",
    "2026-11-28",
)
#: The cuBLAS a torch CUDA build's wheel pins (nvidia-cublas-cu12), per CUDA version of the build, where it is one
#: version across the releases that publish that build (torch 2.4-2.6).
CUBLAS: dict[str, str] = {"12.1": "12.1.3.1", "12.4": "12.4.5.8", "12.6": "12.6.4.1"}
H20_SIGFPE_SOURCE = Source(
    "pytorch/pytorch #152017 (open), om-ai-lab/VLM-R1 #71, hiyouga/LLaMA-Factory #2750 and #6828: cuBLAS 12.1.x GEMM heuristics"
    " divide by zero on H20 (cublasLt backtrace, signal 8); fixed from cuBLAS 12.3.4.1 / 12.4.5.8 (FACTS §13)",
    "2026-11-28",
)
#: The first cuBLAS without the H20 SIGFPE: a build that pins an older one can show it on an H20 (a lead, not a verdict).
H20_SIGFPE_FIXED = "12.3.4.1"


@dataclass(frozen=True)
class FlashWheels:
    """Prebuilt flash-attn wheels of the releases in [first, until): exact torch builds, CUDA majors, Pythons."""

    first: str
    until: str
    torch: tuple[str, ...]
    cuda_majors: tuple[int, ...]
    python: tuple[str, str]
    source: Source = Source("Dao-AILab/flash-attention .github/workflows/publish.yml at each tag (FACTS §2)", "2026-08")
    #: The C++ ABI flags each torch build's wheel is published with (setup.py picks the installed torch's).
    abis: tuple[bool, ...] = (False, True)


FA_27 = Source(
    "flash-attention release assets v2.7.0-v2.7.3 (torch 2.1.2-2.5.1, cu11/cu12) and v2.7.4.post1 (torch 2.2.2-2.6.0, cu12), each"
    " cxx11abiFALSE and cxx11abiTRUE, cp39-cp313 (github.com/Dao-AILab/flash-attention/releases/tag/v2.7.4.post1; publish.yml"
    " at each tag; e.g. flash_attn-2.7.4.post1+cu12torch2.5cxx11abiFALSE-cp311-cp311-linux_x86_64.whl); FACTS §2",
    "2026-11-28",
)
FA_283 = Source("flash-attention v2.8.3.post1 release assets (CUDA 12.9.1 builds); 2.8.3.post2 is an sdist on PyPI; #1967, #2069 (FACTS §8)", "2026-11-23")
FLASH_ATTN: tuple[FlashWheels, ...] = (
    FlashWheels("2.6.3", "2.6.4", ("2.0.1", "2.1.2", "2.2.2", "2.3.1", "2.4.0"), (11, 12), ("3.8", "3.12")),
    FlashWheels("2.7.0", "2.7.4", ("2.1.2", "2.2.2", "2.3.1", "2.4.0", "2.5.1"), (11, 12), ("3.9", "3.13"), FA_27),
    FlashWheels("2.7.4", "2.8.0", ("2.2.2", "2.3.1", "2.4.0", "2.5.1", "2.6.0"), (12,), ("3.9", "3.13"), FA_27),
    FlashWheels("2.8.0", "2.8.3", ("2.4.0", "2.5.1", "2.6.0", "2.7.1"), (12,), ("3.9", "3.13")),
    FlashWheels("2.8.3", "2.8.4", ("2.4.0", "2.5.1", "2.6.0", "2.7.1", "2.8.0"), (12,), ("3.9", "3.13"), FA_283),
)
#: FlashAttention-3 (`flash-attn-3` wheels on PyTorch's cu126/cu130 indexes, torch's stable ABI): Hopper only.
FA3 = Source("flash-attention #1730 (stable-ABI port); download.pytorch.org cu126/cu130 indexes host flash-attn-3 for torch ≥ 2.9 (FACTS §8)", "2026-11-23")
FA3_MIN_TORCH = "2.9"
#: Hugging Face kernels (`attn_implementation="kernels-community/flash-attn2"`): variants per torch/CUDA/ABI.
HF_KERNELS = Source("huggingface/kernels 0.17.2 README: variants like torch212-cxx11-cu130-x86_64-linux (FACTS §8)", "2026-11-23")

# transformers' soft torch floor: from this transformers release on, torch must be at least this (FACTS §3).
TRANSFORMERS_TORCH_FLOOR: tuple[tuple[str, str], ...] = (
    ("4.37.0", "1.11"),
    ("4.49.0", "2.0"),
    ("4.52.0", "2.1"),
    ("4.56.0", "2.2"),
    ("5.1.0", "2.4"),
)


@dataclass(frozen=True)
class Gpu:
    """A GPU type the matrix can name; `pattern` recognises it in `nvidia-smi --query-gpu=name`."""

    name: str
    compute_capability: tuple[int, int] | None
    pattern: str
    min_cuda: str = "11.0"
    source: Source = Source("NVIDIA CUDA GPUs compute capability table; CUDA release notes (FACTS §4, §8)", "2026-11-23")

    @property
    def sm(self) -> str:
        """`sm80`, or `cpu` for the CPU pseudo-GPU."""
        cc = self.compute_capability
        return f"sm{cc[0]}{cc[1]}" if cc else "cpu"


GPUS: dict[str, Gpu] = {
    g.name: g
    for g in (
        Gpu("cpu", None, r"^$"),
        Gpu("V100", (7, 0), r"\bV100\b"),
        Gpu("T4", (7, 5), r"\bT4\b"),
        Gpu("A100", (8, 0), r"\bA100\b"),
        Gpu("A10", (8, 6), r"\bA10G?\b"),
        Gpu("RTX3090", (8, 6), r"\bRTX 3090\b"),
        Gpu("L4", (8, 9), r"\bL4\b"),
        Gpu("L40S", (8, 9), r"\bL40S\b"),
        Gpu("RTX4090", (8, 9), r"\bRTX 4090\b"),
        Gpu("H20", (9, 0), r"\bH20\b", "11.8"),
        Gpu("H100", (9, 0), r"\bH100\b", "11.8"),
        Gpu("H200", (9, 0), r"\bH200\b", "11.8"),
        Gpu("B200", (10, 0), r"\bB200\b", "12.8"),
        Gpu(
            "B300",
            (10, 3),
            r"\bB300\b",
            "12.9",
            Source("CUDA 12.9 release notes (sm_103 target); compute capability 10.3 is medium confidence (FACTS §8)", "2026-11-23"),
        ),
        Gpu("RTX5090", (12, 0), r"\bRTX 5090\b", "12.8"),
        Gpu("RTXPRO6000", (12, 0), r"\bRTX PRO 6000\b", "12.8"),
    )
}

#: FlashAttention-2 kernels exist for Ampere and newer only.
FLASH_ATTN_MIN_CC = (8, 0)
#: bf16 kernels arrive with Ampere too; on older GPUs bf16 is emulated or refused.
BF16_MIN_CC = (8, 0)
#: What a dtype or kernel needs of the GPU: the lowest compute capability that has it (FACTS §12: NVIDIA's CUDA GPUs list,
#: the flash-attention README); FlashAttention-3 is Hopper's alone.
NEEDS: dict[str, tuple[tuple[int, int], str]] = {
    "bf16": (BF16_MIN_CC, "bf16 needs compute capability 8.0 (Ampere) or newer"),
    "FlashAttention-2": (FLASH_ATTN_MIN_CC, "FlashAttention-2 needs compute capability 8.0 (Ampere) or newer"),
    "fp8": ((8, 9), "fp8 needs compute capability 8.9 (Ada) or 9.0 (Hopper) and newer"),
    "FlashAttention-3": ((9, 0), "FlashAttention-3 needs a Hopper GPU (compute capability 9.0)"),
}
#: GPU architecture families as messages name them, with the first compute capability of each (NVIDIA's CUDA GPUs list).
ARCHITECTURES: dict[str, tuple[int, int]] = {
    "Maxwell": (5, 0), "Pascal": (6, 0), "Volta": (7, 0), "Turing": (7, 5), "Ampere": (8, 0), "Ada": (8, 9), "Hopper": (9, 0), "Blackwell": (10, 0),
}  # fmt: skip


def gpu_from_smi_name(smi_name: str) -> str | None:
    """Map an `nvidia-smi` name (e.g. `NVIDIA A100-SXM4-80GB`) to the matrix's GPU name, or None."""
    for gpu in GPUS.values():
        if gpu.compute_capability and re.search(gpu.pattern, smi_name):
            return gpu.name
    return None


def cuda_from_tag(tag: str) -> str | None:
    """A torch build's local tag as the cuda axis: `cu128` → `12.8`, `cu118` → `11.8`, `cpu` → `none`; None
    for a tag that names no build (`rocm6.2`, `xpu`, or nothing)."""
    if tag == "cpu":
        return "none"
    digits = tag.removeprefix("cu")
    return f"{digits[:-1]}.{digits[-1]}" if tag.startswith("cu") and digits.isdigit() and len(digits) >= 2 else None


def minor(version: str) -> str:
    """`2.5.1` → `2.5`."""
    release = Version(version).release
    return f"{release[0]}.{release[1] if len(release) > 1 else 0}"


def _py_in(python: str, bounds: tuple[str, str]) -> bool:
    return Version(bounds[0]) <= Version(python) <= Version(bounds[1])


def cxx11_abi(torch: str, cuda: str | None = None) -> bool:
    """Whether the pip wheels of this torch release (and CUDA build, where it matters: 2.6.0+cu126 does, 2.6.0+cu124
    does not) use the CXX11 ABI; read `torch._C._GLIBCXX_USE_CXX11_ABI` in the image to be sure."""
    return Version(torch) >= CXX11_ABI_FROM or (cuda is not None and cuda in CXX11_ABI_BUILDS.get(minor(torch), ()))


def cublas(cuda: str) -> str | None:
    """The cuBLAS a torch build of this CUDA version pins (CUBLAS), or None where the catalog does not say."""
    return CUBLAS.get(cuda)


def h20_sigfpe_lead(cuda: str, gpu: str) -> str | None:
    """Why an environment can die of SIGFPE in cuBLAS on an H20 (its build pins a cuBLAS before the fix), or None."""
    found = cublas(cuda)
    if gpu != "H20" or found is None or Version(found) >= Version(H20_SIGFPE_FIXED):
        return None
    where = H20_SIGFPE_SOURCE.where.split(":")[0]
    return f"cu{cuda.replace('.', '')} torch wheels pin cuBLAS {found}, before {H20_SIGFPE_FIXED}: GEMMs can die of SIGFPE on an H20 ({where})"


def min_driver(cuda: str) -> str | None:
    """The lowest NVIDIA driver a CUDA build runs on, or None for CPU builds and unknown majors."""
    return None if cuda == "none" else CUDA_MIN_DRIVER.get(int(cuda.split(".")[0]))


def torch_floor(transformers: str) -> str | None:
    """The lowest torch that this transformers release accepts, per the catalog."""
    floor = None
    for since, torch in TRANSFORMERS_TORCH_FLOOR:
        if Version(transformers) >= Version(since):
            floor = torch
    return floor


def flash_wheels(release: str) -> FlashWheels | None:
    """The published-wheel facts for a flash-attn release, or None where the catalog knows none."""
    v = Version(release)
    for entry in FLASH_ATTN:
        if Version(entry.first) <= v < Version(entry.until):
            return entry
    return None


def flash_wheel_cuda_tag(release: str, cuda: str) -> str:
    """The CUDA tag in the wheel name setup.py guesses: cu118/cu123 before 2.7, then the major only."""
    major = int(cuda.split(".")[0])
    if Version(release) < Version("2.7.0"):
        return "cu118" if major == 11 else "cu123"
    return f"cu{major}"


def flash_wheel_name(release: str, torch: str, cuda: str, python: str, abi_flag: bool | None = None) -> str:
    """The wheel file flash-attn's setup.py looks for on its GitHub release (FACTS §2); pass the ABI
    flag read from the installed torch where there is one, rather than the catalog's guess."""
    py = "cp" + python.replace(".", "")
    abi = "TRUE" if (cxx11_abi(torch, cuda) if abi_flag is None else abi_flag) else "FALSE"
    tag = flash_wheel_cuda_tag(release, cuda)
    return f"flash_attn-{release}+{tag}torch{minor(torch)}cxx11abi{abi}-{py}-{py}-linux_x86_64.whl"


def environment_reasons(*, cuda: str, torch: str, transformers: str, flash_attn: str, gpu: str, python: str, build_from_source: bool) -> list[str]:
    """Why this environment cannot be built or run as declared; empty when the catalog sees no obstacle."""
    reasons: list[str] = []
    gpu_info = GPUS[gpu]
    on_cpu = gpu_info.compute_capability is None
    builds = TORCH.get(minor(torch))
    if cuda == "none" and not on_cpu:
        reasons.append(f"a CPU build of torch (cuda: none) cannot drive GPU {gpu}; pair cuda: none with gpu: cpu")
    if cuda != "none" and on_cpu:
        reasons.append(f"CUDA {cuda} needs a GPU; the cpu runner runs cuda: none environments")
    if builds is None:
        reasons.append(f"torch {torch} is not in envmatrix's catalog (known: {', '.join(TORCH)}); add its builds to catalog.TORCH")
    else:
        if cuda != "none" and cuda not in builds.cuda:
            reasons.append(
                f"torch {minor(torch)} publishes CUDA builds {', '.join('cu' + c.replace('.', '') for c in builds.cuda)}"
                f" only, no cu{cuda.replace('.', '')}; pick one of CUDA {', '.join(builds.cuda)}"
            )
        if not _py_in(python, builds.python):
            reasons.append(f"torch {minor(torch)} publishes wheels for Python {builds.python[0]}–{builds.python[1]}, not {python}")
    if cuda != "none" and not on_cpu and Version(cuda) < Version(gpu_info.min_cuda):
        reasons.append(f"{gpu} ({gpu_info.sm}) needs CUDA ≥ {gpu_info.min_cuda}; CUDA {cuda} has no kernels for it")
    cc = gpu_info.compute_capability
    if cuda != "none" and cc is not None and int(cuda.split(".")[0]) >= 13 and cc < CUDA13_MIN_CC:
        reasons.append(f"CUDA 13 dropped {gpu} ({gpu_info.sm}): it builds for sm75 (Turing) and newer only; use a CUDA 12 build")
    floor = torch_floor(transformers)
    if floor is not None and Version(torch) < Version(floor):
        reasons.append(f"transformers {transformers} requires torch ≥ {floor} (it disables PyTorch below that); use torch ≥ {floor} or an older transformers")
    if flash_attn != "none":
        reasons.extend(_flash_reasons(flash_attn, torch=torch, cuda=cuda, gpu=gpu_info, python=python, build_from_source=build_from_source))
    return reasons


def _flash_reasons(release: str, *, torch: str, cuda: str, gpu: Gpu, python: str, build_from_source: bool) -> list[str]:
    cc = gpu.compute_capability
    if cc is None:
        return [f"flash-attn {release} needs a CUDA GPU of sm80+ (Ampere or newer); there is none on the cpu runner"]
    if cc < FLASH_ATTN_MIN_CC:
        return [f"flash-attn (FlashAttention-2) needs sm80+ (Ampere or newer); {gpu.name} is {gpu.sm}"]
    if build_from_source:
        return []
    return release_wheel_reasons(release, torch=torch, cuda=cuda, python=python)


def release_wheel_reasons(release: str, *, torch: str, cuda: str, python: str) -> list[str]:
    """Why the official releases page has no wheel of this flash-attn for this torch, CUDA and Python."""
    allow = "a source build takes hours; allow it with build_from_source: true"
    wheels = flash_wheels(release)
    if wheels is None:
        return [f"envmatrix's catalog knows no prebuilt wheels of flash-attn {release}; {allow}, or add the release to catalog.FLASH_ATTN"]
    reasons: list[str] = []
    if torch not in wheels.torch:
        same_minor = [t for t in wheels.torch if minor(t) == minor(torch)]
        if same_minor:
            reasons.append(
                f"flash-attn {release}'s wheel for torch {minor(torch)} is built against torch {same_minor[0]}, not {torch}: "
                f"it fails to load with an undefined symbol (flash-attention #931); pin torch {same_minor[0]} or {allow}"
            )
        else:
            reasons.append(f"flash-attn {release} publishes no wheel for torch {minor(torch)} (wheels for {', '.join(wheels.torch)}); {allow}")
    if cuda == "none" or int(cuda.split(".")[0]) not in wheels.cuda_majors:
        reasons.append(f"flash-attn {release} publishes no wheel for CUDA {cuda} (CUDA majors {', '.join(map(str, wheels.cuda_majors))}); {allow}")
    if not _py_in(python, wheels.python):
        reasons.append(f"flash-attn {release} publishes wheels for Python {wheels.python[0]}–{wheels.python[1]}, not {python}; {allow}")
    return reasons


#: Attention implementations that need the flash-attn package in the environment.
FLASH_IMPLEMENTATIONS = ("flash_attention_2",)
#: Hopper-only kernels built from source (`flash_attn_3`).
HOPPER_IMPLEMENTATIONS = ("flash_attention_3",)
#: Hugging Face kernels name a Hub repository as the implementation (`kernels-community/flash-attn2`).
KERNELS_PREFIX = "kernels-community/"


def scenario_reasons(*, attn: str, dtype: str, flash_attn: str, gpu: str) -> list[str]:
    """Why a scenario cannot run in an environment (attention backend or dtype the hardware lacks)."""
    info = GPUS[gpu]
    cc = info.compute_capability
    reasons: list[str] = []
    if attn in FLASH_IMPLEMENTATIONS:
        if flash_attn == "none":
            reasons.append(f"attention {attn} needs flash-attn, and this environment has flash_attn: none")
        if cc is None:
            reasons.append(f"attention {attn} needs a CUDA GPU of sm80+; the cpu runner has none")
    if attn in HOPPER_IMPLEMENTATIONS and (cc is None or cc[0] != 9):
        reasons.append(f"attention {attn} (FlashAttention-3) runs on Hopper (sm90) only; {gpu} is {info.sm}")
    if attn.startswith(KERNELS_PREFIX) and cc is None:
        reasons.append(f"attention {attn} (Hugging Face kernels) needs a CUDA GPU; the cpu runner has none")
    if dtype == "bf16" and cc is not None and cc < BF16_MIN_CC:
        reasons.append(f"bf16 needs sm80+ for native kernels; {gpu} is {info.sm}: use fp16 or fp32 there")
    return reasons


def as_dict() -> dict[str, object]:
    """Everything the catalog knows, each fact with its source and check date (`envmatrix catalog`)."""

    def src(s: Source) -> dict[str, str]:
        return {"source": s.where, "checked": s.checked}

    return {
        "torch": [
            {
                "release": k,
                "cuda": list(v.cuda),
                "default_cuda": v.default_cuda,
                "python": list(v.python),
                "cxx11_abi": cxx11_abi(k + ".0"),
                "cxx11_abi_builds": [c for c in v.cuda if cxx11_abi(k + ".0", c)],
                "cublas": {c: CUBLAS[c] for c in v.cuda if c in CUBLAS},
                **src(v.source),
            }
            for k, v in TORCH.items()
        ],
        "abi": src(CXX11_ABI_SOURCE),
        "cublas": {**src(CUBLAS_SOURCE), "h20_sigfpe_fixed_from": H20_SIGFPE_FIXED, "h20_sigfpe": src(H20_SIGFPE_SOURCE)},
        "flash_attn": [
            {
                "releases": f"{w.first} ≤ v < {w.until}",
                "torch": list(w.torch),
                "cuda_majors": list(w.cuda_majors),
                "python": list(w.python),
                "cxx11_abi": list(w.abis),
                **src(w.source),
            }
            for w in FLASH_ATTN
        ],
        "attention": [
            {"implementation": "flash_attention_3", "gpus": "Hopper (sm90) only", "torch": f"≥ {FA3_MIN_TORCH} (flash-attn-3 on PyTorch's index)", **src(FA3)},
            {"implementation": KERNELS_PREFIX + "flash-attn2", "gpus": "CUDA GPUs the kernel variant was built for", "torch": "per variant", **src(HF_KERNELS)},
        ],
        "gpus": [
            {"name": g.name, "sm": g.sm, "compute_capability": ".".join(map(str, g.compute_capability)), "min_cuda": g.min_cuda, **src(g.source)}
            for g in GPUS.values()
            if g.compute_capability
        ],
        "base_images": [
            {"cuda": cuda, "wheels": base_image(cuda, toolkit=False), "source_build": base_image(cuda, toolkit=True), **src(CUDA_IMAGE_SOURCE)}
            for cuda in CUDA_IMAGE_VERSIONS
        ],
        "distribution_pythons": {"pythons": {k: list(v) for k, v in DISTRIBUTION_PYTHONS.items()}, **src(DISTRIBUTION_SOURCE)},
        "cuda": {
            "min_driver": {str(k): v for k, v in CUDA_MIN_DRIVER.items()},
            "cuda13_min_sm": f"sm{CUDA13_MIN_CC[0]}{CUDA13_MIN_CC[1]}",
            "drivers": src(CUDA_DRIVER_SOURCE),
            "architectures": src(CUDA_ARCH_SOURCE),
        },
    }
