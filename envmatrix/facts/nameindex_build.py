"""Build the name index (facts/nameindex.json) from the packages' own releases: which distribution defines each public
class, function and module name that appears in the GRPO stack's tracebacks.

Read from the wheels (and, for a package published only as an sdist, its source archive) with `ast`, never installed:
each module's top-level classes and functions, its CamelCase assignments (aliases) and its `__all__`; the top-level
import packages each distribution installs; and, for a name two distributions define, which one each distribution's
own modules import it from (`from transformers import Trainer` in trl: trl's `Trainer` is transformers'). Several
releases of a package are joined, so a name a newer release removed (transformers' `HybridCache`) is still known.
And what each distribution's code takes from the others (`uses`: peft imports `HybridCache` from transformers).

    python -m envmatrix.facts.nameindex_build --download DIR      # pip download SOURCES into DIR, then build
    python -m envmatrix.facts.nameindex_build --wheels DIR ...    # build from archives already there

`nox -s nameindex` runs the first. The CPU torch wheel is taken from PIP_FIND_LINKS / --wheels where one is there
(a CUDA torch is several GB and defines the same names).
"""

from __future__ import annotations

import argparse
import ast
import configparser
import gzip
import json
import os
import re
import subprocess
import sys
import tarfile
import warnings
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .nameindex import DATA_FILE, MEMBERS_FILE

#: The releases the index is built from: the newest of each package of the stack, and the older releases users still run
#: (names later releases removed are still the package's). Distribution names as pip spells them.
SOURCES: tuple[str, ...] = (
    "torch", "transformers", "transformers==4.57.6", "transformers==4.46.3", "tokenizers", "accelerate", "accelerate==1.10.1",
    "accelerate==0.34.2", "peft", "peft==0.17.1", "peft==0.13.2", "trl", "trl==0.23.1", "trl==0.19.1", "deepspeed", "vllm",
    "vllm==0.8.5", "flash-attn", "liger-kernel", "bitsandbytes", "datasets", "ray", "sglang", "megatron-core", "unsloth",
    "unsloth-zoo", "verl", "openrlhf", "ms-swift", "llamafactory", "huggingface-hub", "safetensors", "xformers", "triton",
    "flashinfer-python",
    # the frameworks around the stack that users' tracebacks cross as often (a Lightning `Trainer` refusing `gpus`, a
    # sentence-transformers model, a timm backbone), and the older releases of those still run. Not `lightning`: its code
    # is pytorch-lightning's under another import name, and users' prose calls pytorch-lightning "lightning"; nor
    # pytorch-lightning before 1.9, whose metadata today's pip refuses. diffusers without the models' remote code it
    # vendors (`_VENDORED`), the quantization integrations that import transformers' internals (autoawq 0.2.6's
    # `shard_checkpoint`, optimum's GPTQ). Not torch-geometric: its `Parameter`, `DataLoader`, `Linear` make torch's
    # ambiguous (measured: one caller gained, torch's `Parameter` lost)
    "pytorch-lightning", "pytorch-lightning==1.9.5", "torchmetrics", "sentence-transformers", "torchvision", "timm",
    "transformers==4.30.2", "transformers==3.5.1", "trl==0.11.4", "keras", "mmengine", "jax", "flax",
    "diffusers", "autoawq", "autoawq==0.2.6", "optimum",
    # the libraries beside the stack that users' logs name as the side that changed (measured on the held-out sets: a
    # third of the API mismatches readers found had a callee outside the releases above: pillow, librosa, pydantic,
    # openai, ultralytics ...). The newest release only: one release read leaves a name it lacks undecided
    # (boundary.Resolved.uncovered); read with the release before a removal, Pillow 9 lacking `PILLOW_VERSION` (removed in
    # 7) made that import a missing module (measured). Not numpy or scipy: their modules name them already, and their
    # functions' common names (`copy`, `load`) made users' own names theirs (measured); nor protobuf (`google` is many
    # distributions' namespace), torchao (its wheel installs a top-level `test`) or torchaudio (its tokenizers' members
    # made a remote model's tokenizer a subclass of torchaudio's, through sglang's `Tokenizer`: measured)
    "pillow", "scikit-learn", "pyarrow", "fsspec", "pydantic", "httpx", "openai", "torchtext==0.18.0", "librosa",
    "ultralytics", "supervision", "gymnasium", "stable-baselines3", "wandb", "tensorboardX", "tensorboard", "open-clip-torch",
    "kornia", "einops", "gguf", "faster-whisper", "llama-index-core", "langchain-core", "mmdet", "onnx", "onnxruntime", "packaging",
)  # fmt: skip
#: Modules a distribution copies from models' remote code (diffusers' Kolors pipeline carries ChatGLM's `ChatGLMTokenizer`
#: and `ChatGLMModel`): not its own names, and users load those classes through transformers' remote code, so reading them
#: would name the distribution for code it only carries.
_VENDORED: dict[str, tuple[str, ...]] = {
    "diffusers": ("diffusers/pipelines/kolors/text_encoder.py", "diffusers/pipelines/kolors/tokenizer.py"),
}
#: Published only as source archives (pip download takes the sdist; its metadata is not built).
SDIST_ONLY = frozenset({"deepspeed", "flash-attn"})
#: Folders of a source archive that are not installed packages.
_NOT_PACKAGES = frozenset({"tests", "test", "docs", "examples", "benchmarks", "scripts", "csrc", "build", "third_party", "op_builder"})
_PUBLIC = re.compile(r"^[A-Za-z]\w*$")
_EXPORTED = re.compile(r"^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*$")  # a class-like name in a lazy import structure
#: A module's public constant (`WEIGHTS_NAME`, `ALL_LAYERNORM_LAYERS`): imported by name as classes are, and removed as they are.
_CONSTANT = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")
_CAMEL = re.compile(r"^[A-Z][a-z0-9]+[A-Z]\w*$|^[A-Z]\w*(?:Error|Config|Cache|Model|Trainer|Tokenizer)$")
_ARCHIVE = re.compile(r"^(?P<name>[A-Za-z0-9_.]+?)-(?P<version>\d[\w.+!]*?)(?:-|\.tar\.gz$|\.zip$)")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Distribution:
    """What one distribution's archives define: its releases, import packages, names, and names it imports from others."""

    name: str
    releases: set[str] = field(default_factory=set)
    packages: set[str] = field(default_factory=set)
    names: set[str] = field(default_factory=set)
    imports: dict[str, set[str]] = field(default_factory=dict)  # name -> top-level packages it is imported from
    requires: set[str] = field(default_factory=set)  # distributions it always requires (Requires-Dist without an extra)
    exports: set[str] = field(default_factory=set)  # names its top-level `__init__` exports (its public API)
    scripts: set[str] = field(default_factory=set)  # the console scripts its wheels install (`llamafactory-cli`, `swift`)
    uses: set[str] = field(default_factory=set)  # `module:name` it imports or reads, and the dotted modules it imports
    members: set[str] = field(default_factory=set)  # what its classes have: methods, class attributes, `self.x = …`
    keywords: set[str] = field(default_factory=set)  # the parameters its functions and methods take, and dataclass fields


_REQUIRES = re.compile(r"^Requires-Dist:\s*(?P<name>[A-Za-z0-9][\w.-]*)(?P<rest>.*)$", re.M)


def _dist_info(path: Path, name: str) -> str:
    """A file of a wheel's `.dist-info` folder (`METADATA`, `entry_points.txt`) as text; '' for an sdist or a wheel without it."""
    if path.suffix != ".whl":
        return ""
    with zipfile.ZipFile(path) as zf:
        found = next((n for n in zf.namelist() if n.endswith(f".dist-info/{name}")), None)
        return zf.read(found).decode("utf-8", "replace") if found else ""


def _requires(path: Path) -> set[str]:
    """The distributions a release always requires: a wheel's METADATA Requires-Dist lines that no extra guards; an sdist's
    `*.egg-info/requires.txt` lines before its first `[extra]` section (a setup.py's install_requires)."""
    if path.suffix != ".whl":
        return {canonical(m.group(0)) for m in map(_REQUIREMENT.match, _egg_requires(path)) if m}
    text = _dist_info(path, "METADATA")
    return {canonical(m.group("name")) for m in _REQUIRES.finditer(text) if "extra" not in m.group("rest")}


_REQUIREMENT = re.compile(r"[A-Za-z0-9][\w.-]*")


def _egg_requires(path: Path) -> list[str]:
    """An sdist's unconditional requirement lines (its egg-info's requires.txt, up to the first section); [] where it has none."""
    with tarfile.open(path) as tar:
        member = next((m for m in tar.getmembers() if m.name.count("/") == 2 and m.name.endswith(".egg-info/requires.txt")), None)
        handle = tar.extractfile(member) if member is not None else None
        text = handle.read().decode("utf-8", "replace") if handle is not None else ""
    lines = text.split("\n[", 1)[0].splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("[")]


def _scripts(path: Path) -> set[str]:
    """The console scripts a wheel installs (its entry_points.txt's [console_scripts]): the commands a log shows it run by."""
    text = _dist_info(path, "entry_points.txt")
    parser = configparser.ConfigParser(interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # script names keep their case
    parser.read_string(text)
    return set(parser["console_scripts"]) if parser.has_section("console_scripts") else set()


def _members(path: Path) -> Iterator[tuple[str, bytes]]:
    """(path inside the installed tree, source) of each .py file (and .pyi stub) in a wheel or a source archive."""
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.filename.endswith((".py", ".pyi")) and ".data/" not in info.filename.split("/")[0]:
                    yield info.filename.removesuffix("i"), zf.read(info)  # a compiled package's stubs name its API
        return
    with tarfile.open(path) as tf:
        for member in tf:
            if member.isfile() and member.name.endswith(".py"):
                inner = member.name.split("/", 1)[1] if "/" in member.name else member.name
                fh = tf.extractfile(member)
                if fh is not None and inner.split("/")[0] not in _NOT_PACKAGES and "/" in inner:
                    yield inner, fh.read()


def read_source(source: bytes, dist: Distribution) -> None:
    """Top-level definitions, CamelCase aliases, constants, `__all__`, and `from X import Name` of one module."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # invalid escapes in old sources
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and _PUBLIC.match(node.name):
            dist.names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == "__all__" and isinstance(node.value, ast.List | ast.Tuple):
                    dist.names.update(e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str) and _PUBLIC.match(e.value))
                elif isinstance(target, ast.Name) and (_CAMEL.match(target.id) or _CONSTANT.match(target.id)):
                    dist.names.add(target.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and _CONSTANT.match(node.target.id):
            dist.names.add(node.target.id)
    for each in ast.walk(tree):
        if isinstance(each, ast.ImportFrom) and each.module and each.level == 0:
            top = each.module.split(".")[0]
            for alias in each.names:
                if _PUBLIC.match(alias.name):
                    dist.imports.setdefault(alias.name, set()).add(top)
    dist.uses |= read_uses(tree)
    members, keywords = read_members(tree)
    dist.members |= members
    dist.keywords |= keywords


#: A member as the index keeps it: a Python name, private ones too (`_register_hooks_recursively`), no dunder.
_MEMBER = re.compile(r"^_{0,2}[A-Za-z]\w*$")
#: Parameters every callable takes, and members every class has: they tell no distribution apart.
_COMMON = frozenset({"self", "cls", "args", "kwargs", "config", "name", "model", "x", "input", "inputs", "kwds", "device", "dtype"})


def read_members(tree: ast.Module) -> tuple[set[str], set[str]]:
    """The members of each class a module defines (its methods, its class attributes and dataclass fields, what its
    methods assign to `self.x`) and the keyword parameters of each function and method (and the fields a dataclass or a
    pydantic model takes as keywords): the other side of `'ChatGLMForConditionalGeneration' object has no attribute
    'enable_input_require_grads'` (a remote model's class, in no index, missing what transformers' base class has) and of
    `forward() got an unexpected keyword argument 'output_attentions'`."""
    members: set[str] = set()
    keywords: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    members.add(item.name)
                elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    members.add(item.target.id)
                    keywords.add(item.target.id)
                elif isinstance(item, ast.Assign):
                    members.update(t.id for t in item.targets if isinstance(t, ast.Name))
            for each in ast.walk(node):
                if isinstance(each, ast.Attribute) and isinstance(each.ctx, ast.Store) and isinstance(each.value, ast.Name) and each.value.id == "self":
                    members.add(each.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            a = node.args
            keywords.update(p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs))
    return {m for m in members if _MEMBER.match(m) and not m.startswith("__")} - _COMMON, {k for k in keywords if _PUBLIC.match(k)} - _COMMON


def read_uses(tree: ast.Module) -> set[str]:
    """What one module takes from other modules: `module:name` for each `from module import name` and each attribute
    read through an imported module (`torch.library.register_fake` → `torch.library:register_fake`, also through
    `import torch.nn as nn`), and each dotted module it imports. The build keeps those of other distributions: who
    imports a name a release removed, when no frame of the importer is printed."""
    out: set[str] = set()
    bound: dict[str, str] = {}  # a name the module binds by `import` -> the module it is
    for each in ast.walk(tree):
        if isinstance(each, ast.ImportFrom) and each.module and each.level == 0:
            out.add(each.module)
            out.update(f"{each.module}:{a.name}" for a in each.names if _PUBLIC.match(a.name))
        elif isinstance(each, ast.Import):
            for a in each.names:
                out.add(a.name)
                bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
    for each in ast.walk(tree):
        if isinstance(each, ast.Attribute):
            parts, node = [each.attr], each.value
            while isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            if isinstance(node, ast.Name) and node.id in bound:
                path = bound[node.id].split(".") + parts[::-1]
                out.update(f"{'.'.join(path[:i])}:{path[i]}" for i in range(1, len(path)))
    return {u for u in out if "." in u or ":" in u}


def read_exports(source: bytes) -> set[str]:
    """The names a package's top-level `__init__` exports: what it imports (also lazily, under TYPE_CHECKING), its
    `__all__`, and the names in a lazy module's import structure (`_import_structure = {"models.qwen2": ["Qwen2Model"]}`)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            return set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            out.update(a.asname or a.name for a in node.names if _PUBLIC.match(a.asname or a.name))
        elif isinstance(node, ast.ClassDef | ast.FunctionDef) and _PUBLIC.match(node.name):
            out.add(node.name)
        elif isinstance(node, ast.List | ast.Tuple):
            out.update(e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str) and _EXPORTED.match(e.value))
    return out


def read_archive(path: Path, dists: dict[str, Distribution]) -> None:
    m = _ARCHIVE.match(path.name)
    if m is None:
        raise ValueError(f"{path}: not a wheel or sdist file name")
    name = canonical(m.group("name"))
    dist = dists.setdefault(name, Distribution(name))
    dist.releases.add(m.group("version").split("+")[0])
    dist.requires |= _requires(path)
    dist.scripts |= _scripts(path)
    for inner, source in _members(path):
        top = inner.split("/")[0]
        if "-" in top or top.endswith(".dist-info") or inner in _VENDORED.get(name, ()):
            continue
        dist.packages.add(top.removesuffix(".py"))
        read_source(source, dist)
        if inner.count("/") == 1 and inner.endswith("/__init__.py"):
            dist.exports |= read_exports(source)


def read_all(archives: list[Path]) -> dict[str, Distribution]:
    dists: dict[str, Distribution] = {}
    for path in sorted(archives):
        print(f"reading {path.name}", file=sys.stderr)
        read_archive(path, dists)
    return dists


def build(dists: dict[str, Distribution]) -> dict[str, object]:
    """The index as JSON: releases read, import packages, names per distribution, ambiguous names' imports."""
    owner = {pkg: d.name for d in dists.values() for pkg in sorted(d.packages)}
    definers: dict[str, set[str]] = {}
    for d in dists.values():
        for n in d.names:
            definers.setdefault(n, set()).add(d.name)
    imports: dict[str, dict[str, str]] = {}
    for d in dists.values():
        for n, tops in sorted(d.imports.items()):
            if n in d.names:  # its own name (transformers' `Trainer`), whatever one module imports under it
                continue
            sources = {owner[t] for t in tops if t in owner and owner[t] != d.name} & definers.get(n, set())
            if len(definers.get(n, ())) > 1 and len(sources) == 1:
                imports.setdefault(d.name, {})[n] = sources.pop()
    return {
        "about": "which distribution defines each public name: generated by envmatrix.facts.nameindex_build, do not edit",
        "built": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "releases": {d.name: sorted(d.releases) for d in sorted(dists.values(), key=lambda d: d.name)},
        "packages": dict(sorted(owner.items())),
        "names": {d.name: " ".join(sorted(d.names)) for d in sorted(dists.values(), key=lambda d: d.name)},
        "imports": {k: dict(sorted(v.items())) for k, v in sorted(imports.items())},
        "exports": {
            name: " ".join(sorted(ex))
            for name, ex in ((d.name, {n for n in d.exports if len(definers.get(n, ())) > 1}) for d in sorted(dists.values(), key=lambda d: d.name))
            if ex
        },
        # every requirement, indexed or not (vllm requires pydantic): a log stating vllm over pydantic's refusal names it
        "requires": {d.name: sorted(d.requires - {d.name}) for d in sorted(dists.values(), key=lambda d: d.name) if d.requires - {d.name}},
        "scripts": {s: d.name for d in sorted(dists.values(), key=lambda d: d.name) for s in sorted(d.scripts)},
        "uses": _uses(dists, owner),
    }


def build_members(dists: dict[str, Distribution]) -> dict[str, object]:
    """The members and keywords tables (MEMBERS_FILE): kept apart from the index, compressed, and read only when a
    verdict meets a class no index resolves (they are larger than the rest of the index together)."""
    return {
        "about": "whose classes have each member, whose callables take each keyword: generated by envmatrix.facts.nameindex_build, do not edit",
        "releases": {d.name: sorted(d.releases) for d in sorted(dists.values(), key=lambda d: d.name)},
        "members": _unique(dists, "members"),
        "keywords": _unique(dists, "keywords"),
    }


#: A member or keyword more distributions have than this tells none apart: left out.
DEFINERS_KEPT = 8


def _unique(dists: dict[str, Distribution], table: str) -> dict[str, str]:
    """Per distribution, the members (or keywords) its code has that at most DEFINERS_KEPT distributions have: the rest
    (`forward`, `to`, `eval`) tell nothing. Kept as one string per distribution, as `names` are, to keep the file small."""
    count = Counter(m for d in dists.values() for m in getattr(d, table))
    out = {}
    for d in sorted(dists.values(), key=lambda d: d.name):
        kept = sorted(m for m in getattr(d, table) if count[m] <= DEFINERS_KEPT)
        if kept:
            out[d.name] = " ".join(kept)
    return out


#: A name more distributions use than this tells no importer apart: left out, to keep the index small.
USERS_KEPT = 6


def _uses(dists: dict[str, Distribution], owner: dict[str, str]) -> dict[str, str]:
    """`module:name` (or a dotted module) -> the other distributions whose code imports or reads it: who asked for a name
    a release removed (`triton.compiler.compiler:triton_key` → torch) when the log prints no frame of theirs."""
    users: dict[str, set[str]] = {}
    for d in dists.values():
        for use in d.uses:
            top = use.split(":")[0].split(".")[0]
            if owner.get(top, d.name) != d.name:
                users.setdefault(use, set()).add(d.name)
    return {k: " ".join(sorted(v)) for k, v in sorted(users.items()) if len(v) <= USERS_KEPT}


def _shared_exports(dists: dict[str, Distribution], definers: dict[str, set[str]]) -> dict[str, str]:
    """Per distribution, the names its top-level package exports that another distribution defines too (the rest need
    no telling apart)."""
    out = {}
    for d in sorted(dists.values(), key=lambda d: d.name):
        shared = sorted(n for n in d.exports if len(definers.get(n, ())) > 1)
        if shared:
            out[d.name] = " ".join(shared)
    return out


def pinned(sources: tuple[str, ...] = SOURCES) -> tuple[str, ...]:
    """SOURCES as the committed index read them: `name==release` for every release it records (a rebuild from the same
    releases, to change how they are read without changing what is read), and the sources it does not record yet (a
    package or release added to SOURCES: the rebuild adds it and moves nothing else)."""
    releases: dict[str, list[str]] = json.loads(DATA_FILE.read_text(encoding="utf-8"))["releases"]
    recorded = tuple(f"{name}=={v}" for name, versions in releases.items() for v in versions)
    new = []
    for spec in sources:
        name, _, version = spec.partition("==")
        known = releases.get(canonical(name))
        if known is None or (version and version not in known):
            new.append(spec)
    return (*recorded, *new)


def download(folder: Path, sources: tuple[str, ...] = SOURCES) -> None:
    """pip download each of `sources` (no dependencies) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(folder), "--python-version", "3.11"]
    platforms = [
        f"--platform={p}"
        for p in ("manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")
    ]
    for spec in sources:
        name = canonical(re.split(r"[=<>!~]", spec)[0])
        if name == "torch" and any(folder.glob("torch-*.whl")):
            continue
        if name in SDIST_ONLY:  # its metadata is prepared with this interpreter's torch, no extension built
            env = {**os.environ, "DS_BUILD_OPS": "0", "FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE"}
            subprocess.run([*base[:4], "--no-deps", "-d", str(folder), "--no-binary=:all:", "--no-build-isolation", spec], check=True, env=env)
        else:
            subprocess.run([*base, "--only-binary=:all:", *platforms, spec], check=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wheels", type=Path, action="append", default=[], help="a folder of wheels / sdists to read")
    p.add_argument("--download", type=Path, help="pip download SOURCES into this folder first, then read it")
    p.add_argument("--out", type=Path, default=DATA_FILE)
    p.add_argument(
        "--pinned", action="store_true", help="download the releases the committed index records (and the sources it does not record yet), not the newest"
    )
    args = p.parse_args(argv)
    folders = [*args.wheels]
    if args.download:
        download(args.download, pinned() if args.pinned else SOURCES)
        folders.append(args.download)
    archives = [f for folder in folders for f in folder.iterdir() if f.name.endswith((".whl", ".tar.gz"))]
    if not archives:
        print("nameindex: no wheels or sdists to read: pass --wheels DIR or --download DIR", file=sys.stderr)
        return 2
    dists = read_all(archives)
    index = build(dists)
    args.out.write_text(json.dumps(index, indent=0, sort_keys=False) + "\n", encoding="utf-8")
    members = args.out.with_name(MEMBERS_FILE.name)
    # mtime 0: the same releases give the same bytes (a rebuild shows no diff)
    members.write_bytes(gzip.compress((json.dumps(build_members(dists), indent=0) + "\n").encode(), mtime=0))
    names: dict[str, str] = index["names"]  # type: ignore[assignment]
    print(f"{args.out}: {sum(len(v.split()) for v in names.values())} names, {args.out.stat().st_size} bytes; {members}: {members.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
