"""The call boundary an exception crossed: which distribution called (the caller) and which one it called (the callee),
each with the reason it was chosen, so a verdict names both sides of an API mismatch in the right direction.

- The callee is the distribution that defines the name the message names (`Accelerator.__init__() got an unexpected
  keyword argument` → accelerate's `Accelerator`; `cannot import name 'X' from 'transformers'` → transformers;
  `'DeepSpeedZeRoOffload' object has no attribute` → deepspeed), from the generated name index (facts/nameindex.py);
  in a matrix cell the environment's freeze answers first; a name several distributions define is resolved by the
  caller's imports and requirements and by the frames around it, or named ambiguous.
- The caller: for a call the installed release does not take (a TypeError over its arguments, raised at the call, before
  the callee has a frame), the last frame that is not the callee's own code; for an attribute, the frame that asked for it
  (a library's `__getattr__` refusing is looked through: its asker asked); for an import, the module whose import
  statement failed. The standard library is looked through everywhere.

A boundary whose caller is the callee's own code is no mismatch of two releases: it is that package's own failure.
"""

from __future__ import annotations

import itertools
import posixpath
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..facts.modules import KNOWN_IMPORTS, SPELLINGS, known_import
from ..facts.nameindex import Resolved, Table, canonical, definers, import_packages, imports_from, index, misspelt, module_owner, requires, resolve, users
from .ranges import MESSAGE_LINES, Range, in_message
from .stated import Shown, Stated, closing, dist_of
from .tracebacks import LAZY, TAKES, Frame, Raised, unarchived

_KEYWORD = re.compile(
    r"(?P<name>[A-Za-z0-9_.<>]+)\(\) (?:got an unexpected keyword argument ['‘’](?P<member>\w+)['‘’]|"
    r"got multiple values for (?:keyword )?argument '(?P<multi>\w+)'"
    # a signature that made the parameter positional-only (`validate_grammar() got some positional-only arguments passed
    # as keyword arguments: 'tokenizer'`)
    r"|got some positional-only arguments passed as keyword arguments: '(?P<posonly>\w+)'"
    r"|takes no keyword arguments)"
)
#: A wrapper's message that quotes the TypeError it caught after its own words (`Orchestrator initialization failed: Dummy
#: run failed: LTX2TextConnectors.forward() got an unexpected keyword argument 'additive_mask'`).
_WRAPPED_KEYWORD = re.compile(r":\s+" + _KEYWORD.pattern)
#: pybind11's refusal of a call's arguments (`causal_conv1d_fwd(): incompatible function arguments. The following
#: argument types are supported:`): the compiled function of another release than the Python code calling it.
_PYBIND = re.compile(r"(?P<name>[A-Za-z_][\w.]*)\(\): incompatible function arguments")
_POSITIONAL = re.compile(
    r"(?P<name>[A-Za-z0-9_.<>]+)\(\) (?:missing \d+ required (?:keyword-only |positional )?arguments?: '(?P<member>\w+)'"
    r"|" + TAKES + r")"
)
_ATTRIBUTE = re.compile(
    r"(?:['‘’](?:(?P<qual>[A-Za-z_]\w*(?:\.\w+)*)\.)?(?P<cls>\w+)['‘’] object"
    r"|module ['‘’]?(?P<mod>[\w.]+?)['‘’]?|type object ['‘’](?P<type>\w+)['‘’]|^(?P<bare>[A-Z]\w*))"
    r" has no attribute ['‘’]?(?P<member>\w+)['‘’]?"
    # a lazy loader's own refusal (huggingface_hub's and lazy_loader's `No huggingface_hub attribute hf_api`)
    r"|^No (?P<lazy>[a-z_][\w.]*) attribute (?P<lazy_member>\w+)\s*$"
)
_IMPORT = re.compile(r"cannot import name ['‘’]?(?P<member>\w+)['‘’]?(?: from\s+['‘’]?(?P<mod>[A-Za-z_]\w*(?:\.\w+)*))?")
#: The import statement a frame's source line shows (`from pytorch_transformers.modeling import (CONFIG_NAME,`).
_FROM = re.compile(r"\s*from\s+(?P<mod>[A-Za-z_]\w*(?:\.\w+)*)\s+import\b")
_IMPORT_LINE = re.compile(r"\s*import\s+(?P<mod>[A-Za-z_]\w*(?:\.\w+)*)\s*(?:$|\bas\b|,)")
#: A package's own refusal of a name it moved elsewhere (pydantic 2: `` `BaseSettings` has been moved to the
#: `pydantic-settings` package``).
_MOVED = re.compile(r"^[`'\"]?(?P<name>[A-Za-z_]\w*)[`'\"]? (?:has been|was) moved (?:to|into)\b")
#: A library refusing keywords it does not take in its own words (torchmetrics' `Metric.__init__`: `Unexpected keyword
#: arguments: `compute_on_step``): the function that raised is the callee.
#: Keras's own check too: `('Keyword argument not understood:', 'dropout_rate')`.
_REFUSED_KWARGS = re.compile(
    r"^(?:Unexpected keyword arguments?:?\s+[`'‘’\"]?|\(?['\"]Keyword argument not understood:?['\"],\s*['\"])(?P<member>[A-Za-z_]\w*)"
)
#: torch.load refusing what it unpickles under weights_only, its default from torch 2.6.
_WEIGHTS_ONLY = re.compile(r"^Weights only load failed\b")
#: pickle's lookup of a class in the module it was saved from (`Can't get attribute 'DSC3k2' on <module 'ultralytics.nn.modules.block'`).
_UNPICKLED = re.compile(r"^Can't get attribute '(?P<member>\w+)' on <?module '(?P<mod>[A-Za-z_][\w.]*)'")
_MODEL_KWARGS = re.compile(r"The following `?model_kwargs`? are not used by the model: \[['\"](?P<member>\w+)")
_SUBMODULE = re.compile(r"^(?:[A-Z]\w{0,60}:\s+){0,3}[Nn]o module named ['‘’]?(?P<mod>[A-Za-z_]\w*(?:\.\w+)+)['‘’]?")
#: A library's own words that a use an earlier release allowed is refused now (torch: `Integer division of tensors using
#: div or / is no longer supported`, `Legacy autograd function with non-static forward method is deprecated`, `invalid
#: index of a 0-dim tensor. Use tensor.item()`, `torch.utils.ffi is deprecated. Please use cpp extensions instead.`).
#: rules.txt reads it too (`{dropped}`).
DROPPED = re.compile(
    r"\b(?:is|are) no longer supported\b|\b(?:is|are|has been|have been) deprecated\.? Please use\b"
    r"|^Legacy autograd function with non-static forward method is deprecated|^invalid index of a 0-dim tensor\. Use"
)
#: A package's own refusal of a name it removed (`` `np.float_` was removed in the NumPy 2.0 release``, `'HookedTransformer'
#: was removed in TransformerLens 4.0`): the name, and the package as its release notes spell it.
_REMOVED = re.compile(
    r"[`'‘’]?(?P<name>[A-Za-z_][\w.]*)[`'‘’]? (?:was|were|has been|have been|is) removed (?:in|since|as of|from) (?:the )?"
    r"(?P<pkg>[A-Za-z][\w-]*) v?\d"
)
#: Functions that answer for another: an attribute one refuses was asked for by the frame that called it.
#: (also a closure of that name: jax's `deprecation_getattr.<locals>.getattr`)
_ACCESSORS = frozenset({"__getattr__", "__getattribute__", "_getattr", "getattr"})
#: A library's generic wrapper: a decorator's inner function (`deprecation.wrapped_func`, `functools.wraps` wrappers,
#: huggingface_hub's `_inner_fn`), a hook or a module dispatcher (torch's `_call_impl`, accelerate's `new_forward`) passes
#: `*args, **kwargs` on for whoever called it: that one is the caller.
_WRAPPER = re.compile(
    r"_?(?:wrap(?:per|ped)?(?:_\w+)?|\w*_wrapper|wrapped_\w+|inner(?:_\w+)?|_inner_fn|inner_f|decorat\w*|new_func|new_forward"
    r"|_fn|_call_impl|_wrapped_call_impl|\w*hook\w*)"
)
#: `X.__init__()` printed without its class (Python <= 3.9): the class is the one the source line constructs.
_CONSTRUCTORS = ("__init__", "__new__", "__post_init__")
MAX_SOURCE = 400
#: A call on a source line: the dotted name before `(`.
_CALL = re.compile(r"(?P<name>[A-Za-z_][\w.]*)\(")
#: A decorator's line that passes every argument on to what it wraps (`return fn(self, **kwargs)`, `func(*args, **kwargs)`).
_FORWARD = re.compile(r"^\s*(?:return\s+)?[A-Za-z_][\w.]*\(\s*(?:self\s*,\s*)?(?:\*[A-Za-z_]\w*\s*,\s*)?\*\*[A-Za-z_]\w*\s*\)\s*$")
#: A library's line building a class it picked at run time with the keywords its own caller passed and it did not take
#: itself (transformers' `from_pretrained`: `model = cls(config, *model_args, **model_kwargs)`).
_PASSES_ON = re.compile(r"(?<![\w.])(?P<target>[a-z_]\w*)\([^()\n]*\*\*\w*kwargs\s*\)")
#: A package a range message names as the one needing another (`trl requires transformers>=4.46`).
_REQUIRER = re.compile(r"(?P<who>[A-Za-z][\w.-]*) (?:requires|needs|depends on)\b")
#: Folders that hold a project's scripts rather than name the project (`open-r1/scripts/`, `Liger-Kernel/examples/`).
_GENERIC_DIRS = frozenset({"examples", "example", "scripts", "script", "tools", "benchmarks", "benchmark", "bin", "src", "training", "train"})
#: Folders whose name says nothing of a project even when repeated (`/mnt/data/data/run.py`).
_NOT_PROJECTS = _GENERIC_DIRS | {"data", "home", "root", "workspace", "work", "mnt", "tmp", "usr", "opt", "code", "projects", "app"}


@dataclass(frozen=True)
class Boundary:
    """Both sides of the call an exception was raised at: what was called and what it lacked, the caller and the callee
    (distributions; `user` for the user's own code; '' where the log does not say), each with why."""

    kind: str  # keyword, positional, attribute, import_name, submodule, default (a default the callee changed), range,
    # dropped (a use the callee's earlier releases allowed)
    name: str  # the called class or function, the object asked, or the module imported from
    member: str  # the keyword, attribute, or name imported ('' where the message names none)
    caller: str
    caller_reason: str
    callee: str
    callee_reason: str
    candidates: tuple[str, ...] = ()
    project: str = ""  # the user's project, where the caller is the user's code and its frames' paths name it

    @property
    def own(self) -> bool:
        """The callee's own code called it: a package's own failure, not two releases that do not go together."""
        return bool(self.callee) and self.caller == self.callee

    @property
    def indexed(self) -> bool:
        """A release of the callee the name index read defines the name imported (or the member asked for): it exists in
        some release, so the installed one is another release, not a package that never had it."""
        return bool(self.callee) and bool(self.member) and self.callee in definers(self.member)

    @property
    def misspelt(self) -> str:
        """The name the callee defines that the one imported from it (or read off its module) misspells: no release ever
        had the name asked for (nameindex.misspelt); '' where it is no misspelling."""
        if self.kind == "import_name" or (self.kind == "attribute" and _known(self.name)):
            return misspelt(self.member, self.callee) if self.callee not in ("", "user") and self.member else ""
        return ""

    @property
    def unrelated(self) -> bool:
        """A library asks an object of another library it neither requires nor imports anything of (transformers' `generate`
        asking vLLM's `SamplingParams` for `update`): no release of the one was written against the other, so the object
        reached it from the code that handed it over, not through two releases at odds."""
        if self.kind != "attribute" or _known(self.name) or self.caller in ("", "user") or self.callee in ("", "user") or self.own:
            return False  # a module's attribute: the asker imported that module itself
        if self.caller not in index().releases or self.callee not in index().releases:
            return False
        return not requires(self.caller, self.callee) and not imports_from(self.caller, self.callee)

    @property
    def uncovered(self) -> bool:
        """The callee is an installed distribution the name index does not read (a widely installed library outside the
        training stack: scipy, numpy), or reads in one release only (torchvision): whether one of its releases defines a
        name cannot be looked up (a name an earlier release had and removed is in no release read)."""
        return bool(self.callee) and self.callee != "user" and len(index().releases.get(self.callee, ())) < 2

    @property
    def crossed(self) -> bool:
        return bool(self.callee) and bool(self.caller) and self.caller != self.callee

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "member": self.member or None,
            "caller": self.who or None,
            "caller_reason": self.caller_reason,
            "callee": self.callee_who or None,
            "callee_reason": self.callee_reason,
        }

    @property
    def callee_who(self) -> str:
        """The callee as a sentence names it: its distribution, or `your code` for a class of the user's (or the model's
        remote code) that a library called into."""
        return "your code" if self.callee == "user" else self.callee

    @property
    def who(self) -> str:
        """The caller as a sentence names it: `open-r1 (your code)` for the user's own project, else its distribution."""
        if self.caller != "user":
            return self.caller
        return f"{self.project} (your code)" if self.project else "your code"


def project_of(path: str) -> str:
    """The user's project a frame's file belongs to, by its path ('' where the path names none): the folder above `src/`
    (`/workspace/open-r1/src/open_r1/grpo.py` → open-r1), a checkout that holds its same-named package
    (`/root/X/X/llm/train/run.py` → X), else the script's folder, looked up past folders that only hold scripts
    (`/home/Liger-Kernel-main/examples/huggingface/training.py` → Liger-Kernel)."""
    parts = [p for p in re.split(r"[/\\]+", posixpath.normpath(path.replace("\\", "/"))) if p and p not in (".", "..", "~")]
    if len(parts) < 2 or path.startswith("<"):
        return ""
    if "transformers_modules" in parts[:-1]:  # a model's remote code: the model repository it came from, not a commit folder
        repo = [p for p in parts[parts.index("transformers_modules") + 1 : -1] if not re.fullmatch(r"[0-9a-f]{40}", p)]
        return repo[-1] if repo and re.fullmatch(r"[\w.+-]{2,80}", repo[-1]) else ""
    twice = [a for a, b in itertools.pairwise(parts[:-1]) if canonical(a) == canonical(b) and a.lower() not in _NOT_PROJECTS]
    if twice and re.fullmatch(r"[\w.+-]{2,80}", twice[-1]):  # a checkout holding its same-named package (`X/X/llm/train.py`)
        return unarchived(twice[-1])
    if "src" in parts[:-1] and parts.index("src") > 0:
        name = parts[parts.index("src") - 1]
    else:
        folders = parts[:-1]
        at = next((i for i, f in enumerate(folders) if i > 0 and f.lower() in _GENERIC_DIRS), len(folders))
        name = folders[at - 1] if at else ""
    if name.lower() in _NOT_PROJECTS:  # `/workspace/examples/x.py`: the folder a container mounts names no project
        return ""
    return unarchived(name) if re.fullmatch(r"[\w.+-]{2,80}", name) else ""


def _dist(frame: Frame) -> str:
    """A frame's distribution as the name index spells it ('' for the user's code)."""
    return module_owner(frame.module) if frame.package and frame.module else canonical(frame.package)


def _looked_through(frame: Frame) -> bool:
    if frame.package == "python" or frame.function.rsplit(".", 1)[-1] in _ACCESSORS or frame.path.startswith("<frozen"):
        return True
    return bool(frame.package) and _WRAPPER.fullmatch(frame.function) is not None  # a library's wrapper, not the user's


def _one_liner(raised: Raised) -> tuple[Frame, ...]:
    """The frames, the outermost read as the user's code where it is `python -c "…"`'s (`File "<string>", line 1, in
    <module>` first, in a traceback printed whole: code a library exec()s is printed under that library's frames)."""
    first = raised.frames[0] if raised.frames and not raised.headless else None
    if first is None or first.path != "<string>" or first.function != "<module>":
        return raised.frames
    return (replace(first, package="", module=""), *raised.frames[1:])


_NAME_ERROR = re.compile(r"^name '(?P<name>\w+)' is not defined")


def guarded(raised: Raised) -> tuple[str, str] | None:
    """(name, distribution) for a NameError over a name another distribution defines (`name 'LoraConfig' is not defined`
    in trl: peft's): the code imports it only when that package imports (a guarded `try: from peft import …`), and it
    did not: the package is not installed, or its release lacks the name. None for any other name (a typo, a local)."""
    m = _NAME_ERROR.match(raised.value) if "NameError" in raised.types else None
    if m is None:
        return None
    name = m.group("name")
    own = canonical(raised.package) if raised.package not in ("", "python") else ""
    found = resolve(name, caller=own, around=[f.package for f in raised.frames if f.package not in ("", "python")])
    named = [d for d in found.candidates if any(name.startswith(f"{p}_") for p in import_packages(d))]
    dist = found.dist or (named[0] if len(named) == 1 else "")  # `flash_attn_varlen_func`: flash-attn's by its prefix
    dist = dist or index().packages.get(name, "")  # `name 'deepspeed' is not defined`: a guarded `import deepspeed`
    return (name, dist) if dist and dist != own else None


_DID_YOU_MEAN = re.compile(r"Did you mean:? ['‘’]?(?P<name>\w+)['‘’]?\??")


def present(raised: Raised, dist: str) -> bool:
    """Whether the distribution defining an undefined name (guarded) is installed all the same, so that the release
    installed lacks the name: Python suggests the same distribution's other spelling (`name 'PreTrainedConfig' is not
    defined. Did you mean: 'PretrainedConfig'?`: its import ran, and the release spells the class the other way), or the
    name is torch's, under whose code every package of the stack runs (`name 'Replicate' is not defined` in transformers:
    a torch release without `torch.distributed.tensor.Replicate`), the package itself aside (`name 'torch' is not defined`
    is an import the code never made)."""
    m = _DID_YOU_MEAN.search(raised.value.split("\n", 1)[0])
    if m is not None and dist in ((suggested := resolve(m.group("name"))).candidates or (suggested.dist,)):
        return True
    name = _NAME_ERROR.match(raised.value)
    return dist == "torch" and name is not None and name.group("name") not in import_packages("torch")


#: A message's first line that stops where its name would follow (`got an unexpected keyword argument`, `missing 2
#: required keyword-only arguments:`): a terminal or the user wrapped it, and the name is on the next line.
_STOPS_SHORT = re.compile(r"(?:keyword argument|has no attribute|cannot import name|required (?:positional |keyword-only )?arguments?:?)\s*$")


def _message(raised: Raised) -> str:
    """The message's first line, joined to the next where it stops short of the name it gives (`_STOPS_SHORT`)."""
    first, _, rest = raised.value.partition("\n")
    if rest and _STOPS_SHORT.search(first):
        return first.rstrip() + " " + rest.partition("\n")[0].strip()
    return first


def _called(raised: Raised) -> tuple[str, str, str, str] | None:
    """(kind, called name, member, module or '') the message names, or None where it names no boundary."""
    text = _message(raised)
    types = raised.types
    if "TypeError" in types:
        if m := _KEYWORD.search(text):
            return "keyword", m.group("name"), m.group("member") or m.group("multi") or m.group("posonly") or "", ""
        if m := _POSITIONAL.search(text):
            return "positional", m.group("name"), m.group("member") or "", ""
        if m := _PYBIND.search(text):  # a compiled function called with another release's arguments
            return "positional", m.group("name"), "", ""
    elif (m := _WRAPPED_KEYWORD.search(text)) and m.group("member"):  # a wrapper quoting the TypeError it caught
        return "keyword", m.group("name"), m.group("member"), ""
    if {"ValueError", "TypeError"} & set(types) and (m := _REFUSED_KWARGS.search(text)) and (raiser := _raising_frame(raised)):
        return "keyword", raiser.function, m.group("member"), raiser.module  # a library's own check of the keywords it took
    if _WEIGHTS_ONLY.search(text):  # the caller relied on torch.load's earlier default
        return "default", "load", "weights_only", "torch"
    if (m := _UNPICKLED.search(text)) and _known(m.group("mod")):
        return "attribute", m.group("mod"), m.group("member"), m.group("mod")
    if m := _MODEL_KWARGS.search(text):  # transformers' generate, refusing what the model's forward does not take
        return "keyword", "GenerationMixin.generate", m.group("member"), ""
    if "AttributeError" in types and (m := _ATTRIBUTE.search(text)):
        if m.group("lazy"):
            return "attribute", m.group("lazy"), m.group("lazy_member"), m.group("lazy")
        if m.group("mod"):
            return "attribute", m.group("mod"), m.group("member"), m.group("mod")
        # a compiled class printed with its module (`'tensorrt_bindings.tensorrt.Builder'`): the first part a package's
        if qual := next((p for p in (m.group("qual") or "").split(".") if _known(p)), ""):
            return "attribute", m.group("cls"), m.group("member"), qual
        return "attribute", m.group("cls") or m.group("type") or m.group("bare"), m.group("member"), ""
    if {"AttributeError", "ImportError"} & set(types) and (m := _REMOVED.search(text)) and (module := _import_of(m.group("pkg"))):
        return "attribute", module, m.group("name").rsplit(".", 1)[-1], module
    if any(t.endswith(("AttributeError", "ImportError")) for t in types) and (m := _MOVED.search(text)) and (module := _raiser(raised)):
        return "import_name", module, m.group("name"), module  # a name the installed release moved out (pydantic 2)
    if DROPPED.search(text) and (module := _raiser(raised)):  # the library that refused names itself by its frame
        return "dropped", module, text.split(". ")[0][:120], module
    if {"ImportError", "ModuleNotFoundError"} & set(types):
        if (m := _IMPORT.search(text)) and m.group("mod"):
            return "import_name", m.group("mod"), m.group("member"), m.group("mod")
        if m and (stmt := _FROM.match(raised.source)):  # Python < 3.7 names no `from`: the statement printed above does
            return "import_name", stmt.group("mod"), m.group("member"), stmt.group("mod")
        if m and (found := resolve(m.group("member")).dist):  # no `from`: the package the name resolves to
            top = next(iter(import_packages(found)), found.replace("-", "_"))
            return "import_name", top, m.group("member"), top
        if (m := _SUBMODULE.search(text)) and _known(m.group("mod")):
            return "submodule", m.group("mod").split(".")[0], m.group("mod"), m.group("mod")
    if (undefined := guarded(raised)) is not None and present(raised, undefined[1]):  # the installed release lacks it
        top = next(iter(import_packages(undefined[1])), undefined[1].replace("-", "_"))
        return "import_name", top, undefined[0], top
    return None


def _raising_frame(raised: Raised) -> Frame | None:
    """The innermost frame where it is a library's (with its module), else None."""
    frame = raised.frames[-1] if raised.frames else None
    return frame if frame is not None and frame.package not in ("", "python") and frame.module else None


def _raiser(raised: Raised) -> str:
    """The import package that raised: its exception type's own module (`pydantic.errors.PydanticImportError`), else the
    innermost library frame's."""
    if "." in raised.type and _known(raised.type.split(".")[0]):
        return raised.type.split(".")[0]
    frame = next((f for f in reversed(raised.frames) if f.package not in ("", "python") and f.module), None)
    return frame.module.split(".")[0] if frame is not None else ""


def _import_of(spelled: str) -> str:
    """The import name of a known package as its own messages spell it (`NumPy` → numpy, `TransformerLens` →
    transformer_lens, `PyTorch` → torch), '' for none."""
    if dist := SPELLINGS.get(canonical(spelled)):
        own = dist.replace("-", "_")  # torch installs functorch too: its own name first
        return own if own in import_packages(dist) else next(iter(import_packages(dist)), own)
    key = re.sub(r"[-_]", "", spelled).lower()
    names = sorted(n for n in {*index().packages, *KNOWN_IMPORTS} if n.islower())  # import names, not `PyTorch` as prose writes it
    return next((name for name in names if name.replace("_", "") == key), "")


def _known(module: str) -> bool:
    return module.split(".")[0] in index().packages or known_import(module)


_SITE = re.compile(r"[/\\](?:site|dist)-packages[/\\]")


def _site_path(module: str, raised: Raised) -> str:
    """The installed path the message or a frame shows for a module's package (`…/site-packages/numpy/__init__.py`), or
    '': a package the name index does not cover is still a distribution, not the user's code, when pip installed it."""
    top = module.split(".")[0]
    for text in (raised.value.split("\n", 1)[0], *(f.path for f in raised.frames)):
        for m in _SITE.finditer(text):
            rest = re.split(r"[/\\]", text[m.end() :], maxsplit=1)
            if rest[0] in (top, f"{top}.py"):
                return text[m.start() + 1 :].split(")")[0].strip()
    return ""


def _installed_importer(module: str, frames: list[Frame], dists: list[str]) -> str:
    """The installed package's module that imports from a module of another top-level package (`torchrl.envs.transforms`
    in site-packages importing `tensordict.nn.common`), or '': pip-installed code imports no module of the user's, so the
    module it imports is an installed distribution's even where the name index does not know it."""
    if not frames or not dists[-1] or dists[-1] == "python" or not _SITE.search(frames[-1].path):
        return ""
    top = module.split(".")[0]
    if (frames[-1].module or "").split(".")[0] == top:
        return ""
    return frames[-1].module or dists[-1]


def _outside_install(module: str, frames: list[Frame], dists: list[str]) -> list[str]:
    """The user's own folder named like a package (`top_nsigma/src/vllm/sampler.py`) is no checkout of it when the message
    shows that package installed in site-packages: a frame outside every site-packages folder is then the user's code."""
    owner = module_owner(module)
    return ["" if d == owner and not _SITE.search(f.path) else d for f, d in zip(frames, dists, strict=True)]


def _owner(name: str) -> str:
    """`Accelerator.__init__` → `Accelerator`; `GRPOTrainer.create_model_card` → `GRPOTrainer`; `unwrap_model` → itself."""
    parts = [p for p in name.split(".") if p and not p.startswith("<")]
    return parts[0] if parts else ""


def constructed(source: str, member: str = "") -> tuple[str, tuple[str, ...]]:
    """The class a source line constructs (`self.model = AsyncLLMEngine.from_engine_args(AsyncEngineArgs(**engine_args))` →
    AsyncEngineArgs), for a message that names `__init__()` without its class; ('', the candidates) where the line
    constructs several (the one whose parentheses hold `member=`, when one does) or none."""
    source = source[:MAX_SOURCE]  # bounded: each call's parentheses are matched by a walk along the line
    calls = []  # (name, start, end of its parentheses)
    for m in _CALL.finditer(source):
        calls.append((m.group("name").rsplit(".", 1)[-1], m.end(), closing(source, m.end() - 1)))
    classes = [c for c in calls if c[0][:1].isupper()]
    if member and (kw := re.search(rf"\b{re.escape(member)}\s*=(?!=)", source)):
        holding = [c for c in calls if c[1] <= kw.start() <= c[2]]
        if holding:
            name = max(holding, key=lambda c: c[1])[0]
            return (name, (name,)) if name[:1].isupper() else ("", (name,))
    names = tuple(dict.fromkeys(c[0] for c in classes))
    return (names[0], names) if len(names) == 1 else ("", names)


def of(
    raised: Raised,
    *,
    installed: Mapping[str, str] | Iterable[str] = (),
    around: Iterable[str] = (),
    stated: Iterable[Stated] = (),
    calls: Iterable[Shown] = (),
) -> Boundary | None:
    """The boundary an exception was raised at, or None when its message names no call, attribute, import or range.
    `around`: the distributions whose frames the rest of the log shows; `stated`: the packages it states, `calls`: the
    classes its code constructs (stated.py)."""
    stated = tuple(stated)  # read more than once: who imports the name, then who requires its package
    called = _called(raised)
    if called is None:
        return _range(raised, stated)
    kind, name, member, module = called
    frames = [f for f in _one_liner(raised) if not _looked_through(f)]
    dists = [_dist(f) for f in frames]
    wrapper = ""  # a library's decorator that raised the TypeError passing its arguments on: it is the callee's side
    if kind in ("keyword", "positional") and frames and frames[-1] is raised.frames[-1] and dists[-1] and _FORWARD.search(raised.source):
        wrapper, frames, dists = dists[-1], frames[:-1], dists[:-1]
    # a library's frame that raised building a class it chose with the keywords its caller passed: the frame above asked
    handed = ""
    if (
        kind == "keyword"
        and not wrapper
        and frames
        and frames[-1] is raised.frames[-1]
        and dists[-1]
        and _PASSES_ON.search(raised.source[:MAX_SOURCE])
        and not re.search(rf"\b{re.escape(member)}\s*=(?!=)", raised.source)
        and (_owner(name) in _CONSTRUCTORS or resolve(_owner(name)).dist == dists[-1])
    ):
        handed, frames, dists = dists[-1], frames[:-1], dists[:-1]
    if module and _SITE.search(raised.value.split("\n", 1)[0]):  # the message shows where the package is installed
        dists = _outside_install(module, frames, dists)
    by_member: Resolved | None = None  # the callee found by the member or keyword asked, not by the class
    # the callee
    if module:
        if _known(module):
            callee, reason = module_owner(module), f"{module} is {module_owner(module)}'s module"
            resolved = Resolved(callee, reason, (callee,))
        elif where := _site_path(module, raised):
            callee = module_owner(module)
            resolved = Resolved(callee, f"{module} is an installed package's module ({where}), one the name index does not cover", (callee,))
        elif kind in ("import_name", "submodule") and (importer := _installed_importer(module, frames, dists)):
            if module.split(".")[0] in sys.stdlib_module_names:  # the interpreter's own library, of another Python release
                callee, what = "python", "Python's standard library"
            else:
                callee, what = module_owner(module), "an installed package's module, one the name index does not cover"
            resolved = Resolved(callee, f"{module} is imported by {importer}, installed code: {what}", (callee,))
        else:
            resolved = Resolved("", f"{module} is no installed package's module the name index knows (the user's own, perhaps)")
    else:
        owner, pasted = _owner(name), ""
        if owner in _CONSTRUCTORS:  # Python <= 3.9: `__init__()` without its class; the source line names what it built
            owner, options = constructed(raised.source, member)
            if not owner and raised.above and _FORWARD.search(raised.source):  # a decorator passed the call on: the frame above built it
                owner, options = constructed(raised.above, member)
            if not owner and not options and kind == "keyword" and (built := _shown_with(member, calls)) is not None:
                owner = built.name  # no line printed builds it: the code the log shows does
                pasted = f"the log's code constructs {owner}(…, {member}=…) (line {built.line_no})"
            name = f"{owner}.{name}" if owner else name
            if not owner:
                said = f"the source line constructs {', '.join(options)}" if options else "no source line names the class"
                resolved = Resolved("", f"{name}() is printed without its class and {said}: ambiguous", options)
        asker = _caller(kind, frames, dists, "")[0]
        near = [*dists, *around]
        shown = {canonical(d) for d in (*near, *(s.dist for s in stated), *installed)}  # the distributions the log shows
        if owner:
            resolved = resolve(owner, caller=asker, installed=installed, around=near)
            if not resolved.dist and not resolved.candidates and kind == "attribute" and asker in ("", "user"):
                resolved = _subclassed(owner, frames, dists) or resolved
            if not resolved.dist and not resolved.candidates and kind == "attribute":  # a subclass may override a method
                subclass = _named_after(owner, caller=asker, installed=installed, around=near)
                if subclass is not None and subclass.dist == asker:  # the library asks a subclass of its own class
                    subclass = Resolved("user", f"{subclass.reason}, written outside {asker} (your code or the model's remote code)")
                resolved = subclass or resolved
            if not resolved.dist and not resolved.candidates and kind in ("attribute", "keyword") and member:
                resolved = _base_with(owner, member, kind, shown) or resolved
            if not resolved.dist and not resolved.candidates:
                resolved = _named_for(owner) or resolved
            if kind in ("keyword", "positional") and "." not in name and owner[:1].islower():
                resolved = _method(owner, resolved, shown, raised.source) or resolved
        elif _owner(name) not in _CONSTRUCTORS:
            resolved = Resolved("", f"{name} names no class or function")
        if pasted:
            resolved = Resolved(resolved.dist, f"{pasted}; {resolved.reason}", resolved.candidates)
        if wrapper and not resolved.dist and (wrapper in resolved.candidates or wrapper not in index().releases):
            # its package defines what it wraps: among the candidates, or a package the index does not read
            resolved = Resolved(
                wrapper,
                f"{resolved.reason}; the frame that raised is {wrapper}'s decorator passing the call on (`{raised.source.strip()[:80]}`)",
                resolved.candidates,
            )
        if handed and resolved.dist in ("", handed):
            resolved = Resolved(
                handed,
                f"the frame that raised is {handed}'s `{raised.source.strip()[:80]}`: it builds a class it picked with the keywords"
                f" its caller passed and it did not take itself, and this release of {handed} does not take {member}",
                resolved.candidates,
            )
        if (
            not resolved.dist
            and member
            and kind in ("attribute", "keyword")
            and (by_member := _by_member(kind, member, resolved, shown, asker, installed=installed, around=near))
        ):
            resolved = by_member
    callee = resolved.dist
    printed = bool(raised.frames) or raised.headless
    caller, caller_reason = _caller(kind, frames, dists, callee, raised.importer, printed=printed)
    if by_member and caller == callee:  # the library's own member of a class it was handed
        resolved = Resolved("", f"{member} is {callee}'s own member, asked by {callee} of a class in no index", resolved.candidates)
        callee = ""
        caller, caller_reason = _caller(kind, frames, dists, callee, raised.importer, printed=printed)
    if raised.hidden and (folded := _folded(raised, kind, member, callee, installed=installed, around=[*dists, *around])):
        caller, caller_reason = folded
    if not callee and caller not in ("", "user") and _calls_back(kind, name, module, resolved):
        # a library calls back into a class or function no indexed release defines: the model, object or patched function
        # the user handed it
        callee = "user"
        resolved = Resolved("user", f"{resolved.reason}; {caller} calls into it: code of your own or of the model's remote code")
    if (
        not frames
        and caller in ("", "user")
        and (
            told := _checkout(raised, callee)
            or _user_of(kind, module, member, callee, stated)
            or _stated_caller(callee, member, stated)
            or _asker_called(kind, callee, member, stated)
            or _shown_importer(kind, callee, raised.source)
        )
    ):
        caller, caller_reason = told
    if caller == callee and callee and (private := _into_private(raised, frames, dists, callee)) is not None:
        caller, caller_reason = private
    # an attribute's asker is printed, and an import's importer is the frame that raised; a call's caller may be cut
    if caller == callee and raised.headless and kind not in ("attribute", "import_name", "submodule"):
        caller, caller_reason = "", f"every frame printed is {callee}'s own code, and the excerpt starts after the caller's frames"
    return Boundary(kind, name, member, caller, caller_reason, callee, resolved.reason, resolved.candidates, _project(caller, frames, dists))


#: A virtual environment created inside a checkout (`/home/team/code/sglang/venv/lib/python3.10/site-packages/…`).
_VENV_IN = re.compile(r"[/\\](?P<checkout>[A-Za-z][\w.-]*)[/\\]\.?v?env[\w.-]*[/\\](?:lib|Lib)[/\\]")


#: A call of a private member (`self.model._get_logits_processor(`): a method no release promises to keep as it is.
_PRIVATE_CALL = re.compile(r"\.(?P<name>_[a-z]\w*)\(")


def _into_private(raised: Raised, frames: list[Frame], dists: list[str], callee: str) -> tuple[str, str] | None:
    """The caller of a failure inside one package's own code, entered through a private method another package's frame
    calls (lagent's `self.model._get_logits_processor(…)` into transformers, whose code then asks its own
    GenerationConfig for `_eos_token_tensor`, which only its `generate` sets up): that package relies on internals this
    release changed, so it is the caller. None where the frame right above the raising one is the package's own, or
    calls no private member."""
    if len(frames) < 2 or frames[-1] is not raised.frames[-1] or dists[-1] != callee or dists[-2] == callee:
        return None
    if not raised.above or (call := _PRIVATE_CALL.search(raised.above[:MAX_SOURCE])) is None:
        return None
    who = dists[-2] or "user"
    return who, f"{frames[-2].where()} calls {callee}'s private {call.group('name')}(), which failed inside {callee}'s own code"


def _shown_with(member: str, calls: Iterable[Shown]) -> Shown | None:
    """The one class the log's code constructs passing `member=` (`TrainingArguments(…, evaluation_strategy="steps")`),
    None where none or several different ones do."""
    passing = [c for c in calls if member in c.keywords]
    return passing[0] if len({c.name for c in passing}) == 1 else None


def _checkout(raised: Raised, callee: str) -> tuple[str, str] | None:
    """The caller of an exception printed without frames whose message shows the environment living inside a checkout
    of a stack package (`…/sglang/venv/lib/…/site-packages/transformers/…`): the program that ran is that package's."""
    m = _VENV_IN.search(raised.value.split("\n", 1)[0])
    owner = dist_of(m.group("checkout")) if m else ""
    if not owner or owner == callee:
        return None
    return owner, f"no frame of the caller is printed; the environment in the message lives inside a checkout of {owner} ({m.group('checkout') if m else ''}/)"


def _stated_caller(callee: str, member: str, stated: Iterable[Stated]) -> tuple[str, str] | None:
    """The caller of an exception printed without frames, from what the log states (stated.py): the one stated package
    that requires the callee (the wheels' requirements, not optional imports: transformers and deepspeed import from each
    other; but a source file the log links or names, `swift/llm/infer/infer_engine/vllm_engine.py`, is code that imports
    it), the topmost where one requires another (llamafactory over the trl it requires); the code's statements first,
    then the versions listed, then the prose. None where the code shown imports the name itself (the user's import), or no
    single package is left. A package outside the index is never stated: a log listing autoawq and peft names peft."""
    told = list(stated)
    if callee in ("", "user") or _imports_itself(callee, member, told):
        return None
    # the source file the log points at may call what its package imports without requiring it (ms-swift's vLLM engine)
    uses = [s for s in told if s.dist != callee and (requires(s.dist, callee) or (s.how == "link" and imports_from(s.dist, callee)))]
    for pool in ([s for s in uses if s.code], [s for s in uses if s.how != "named"], uses):
        dists = {s.dist for s in pool}
        top = [d for d in dists if not any(requires(o, d) for o in dists if o != d)]
        if len(top) == 1:
            said = next(s for s in pool if s.dist == top[0])
            needs = "requires" if requires(said.dist, callee) else "imports"
            why = f"the log {said.said} {said.dist} ({said.quote()}), the one package it names that {needs} {callee}"
            return said.dist, f"no frame of the caller is printed; {why}"
    return None


def _shown_importer(kind: str, callee: str, source: str) -> tuple[str, str] | None:
    """The importer of a name or module printed without frames, under the import statement the log shows above it, where
    that statement imports another package (`from datadreamer.llms import HFTransformers` over `No module named
    'huggingface_hub.utils._errors'`): that package's import ran the failing one. Named by its import name where no index
    knows it (a project's package, installed or not, is still the code that imported)."""
    stmt = _FROM.match(source) or _IMPORT_LINE.match(source)
    if kind not in ("import_name", "submodule") or callee in ("", "user") or stmt is None:
        return None
    top = stmt.group("mod").split(".")[0]
    owner = module_owner(top) or top
    if owner == callee or top in import_packages(callee):
        return None
    return owner, f"no frame of the caller is printed; the statement above it imports {stmt.group('mod')}, and importing it imported {callee}'s"


def _asker_called(kind: str, callee: str, member: str, stated: Iterable[Stated]) -> tuple[str, str] | None:
    """The asker of a missing attribute printed without frames, where the code the log shows calls (or launches) one
    package other than the callee's: `deepspeed.initialize(model, optimizer)` over `'LlamaAttention' object has no
    attribute 'num_heads'`: deepspeed asked transformers' class (a library reads the attributes of the models handed to
    it without requiring their package). None where the code reads the member itself, or calls more than one package."""
    told = list(stated)
    if kind != "attribute" or callee in ("", "user") or _imports_itself(callee, member, told):
        return None
    if member and any(re.search(rf"\.{re.escape(member)}\b", s.line) for s in told if s.code):
        return None
    called = sorted({s.dist for s in told if s.how in ("call", "launch") and s.dist != callee})
    if len(called) != 1:
        return None
    said = next(s for s in told if s.dist == called[0] and s.how in ("call", "launch"))
    return (
        said.dist,
        f"no frame of the caller is printed; the code the log shows {said.said} {said.dist} ({said.quote()}), the one package it hands the object to",
    )


def _imports_itself(callee: str, member: str, told: list[Stated]) -> bool:
    """Whether the code the log shows imports the failing name from the callee itself (the user's own import)."""
    return bool(member) and any(s.how == "import" and s.dist == callee and re.search(rf"\b{re.escape(member)}\b", s.line) for s in told)


def _user_of(kind: str, module: str, member: str, callee: str, stated: Iterable[Stated]) -> tuple[str, str] | None:
    """The caller of an import or a module's attribute printed without frames, of the packages the log states: the one
    whose own code (in the indexed releases: nameindex.users) imports that very name from that module, reads it there,
    or imports that submodule. A log listing trl, peft and transformers over `cannot import name 'EncoderDecoderCache'
    from 'transformers'` names peft, which imports it; trl requires transformers too. Never from the index alone: the
    world's code is larger than the releases indexed (a user's project, diffusers), so a name only one indexed package
    imports is no proof that it asked. None where the code shown imports it itself, or no single stated one is left."""
    if kind == "submodule":
        key, what = (member, ""), f"imports {member}"
    elif kind in ("import_name", "attribute") and module:
        key, what = (module, member), (f"imports {member} from {module}" if kind == "import_name" else f"reads {module}.{member}")
    else:
        return None
    told = list(stated)
    who = [d for d in users(*key) if d not in (callee, "")]
    if not who or _imports_itself(callee, member, told):
        return None
    named = sorted({s.dist for s in told} & set(who))
    if len(named) != 1:
        return None
    said = next(s for s in told if s.dist == named[0])
    why = f"the log {said.said} {said.dist} ({said.quote()}), and of the packages it names only {said.dist}'s own code {what}"
    return named[0], f"no frame of the caller is printed; {why}"


#: How a callee found by its member ends its reason.
_BY_MEMBER = ": the class is built on that package's"


def _by_member(kind: str, member: str, resolved: Resolved, shown: set[str], asker: str, **around: Any) -> Resolved | None:
    """The callee of a member or keyword asked of a class no index resolves: a class in no indexed release (a remote
    model's `ChatGLMForConditionalGeneration` lacking `enable_input_require_grads`, an `__init__()` printed without its
    class refusing `prediction_loss_only`) is built on the distribution whose classes have that member, or whose callables
    take that keyword, where the name index says one does (among a few: the one the others build on, or the one in the
    traceback); a class several distributions define (`Trainer`), on the one of them that has it. None where that is not
    one distribution, or is the asker itself (a library asking its own member of an object it was handed: that object is
    the other side). Never from the index alone: the distribution must be one the log shows (`shown`, canonical names: its
    frames, the packages it states, the environment's freeze); jax's `ShapedArray` lacking `_trace` is no class of ray's,
    the one indexed distribution with a member `_trace`. But where the class is one several indexed packages name and one
    of their classes has the member (`'Attention' object has no attribute 'cross_attention_norm'`: diffusers'), the name
    and the member agree without it."""
    table: Table = "members" if kind == "attribute" else "keywords"
    found = resolve(member, caller=asker, table=table, **around)
    if resolved.candidates and all(c in index().releases for c in resolved.candidates):  # the class is indexed, in several packages
        both = tuple(d for d in resolved.candidates if d in found.candidates)
        # a class several packages name, one of whose classes has the member asked: the two pieces agree; a keyword
        # only where the log shows the package (the keyword table is per package: any of its callables may take it)
        if len(both) != 1 or (table == "keywords" and both[0] not in shown):
            return None
        has = "classes have the member" if table == "members" else "callables take the keyword"
        return Resolved(both[0], f"{resolved.reason}; of these only {both[0]}'s {has} {member}{_BY_MEMBER}", resolved.candidates)
    if resolved.candidates or not found.dist or found.dist == asker or found.dist not in shown:
        return None
    return Resolved(found.dist, f"{resolved.reason}; {found.reason}{_BY_MEMBER}", found.candidates)


def _method(name: str, resolved: Resolved, shown: set[str], source: str) -> Resolved | None:
    """A call refused by a function printed without its class (Python before 3.10 prints a method's bare name:
    `prepare_for_model() got an unexpected keyword argument 'padding'`): a method of the one distribution, of those the log
    shows, whose classes have a member of that name, where no module-level function of that name decides it; and where
    the source line calls it as a method of an object, a module-level function the index alone finds is no answer unless
    the log shows its package (haystack's `retriever.create_embedding(texts=…)` is no call of vllm's function of that
    name). None where nothing changes."""
    if resolved.dist and resolved.dist in shown:
        return None
    method = resolve(name, table="members")
    if method.dist and method.dist in shown:
        return Resolved(method.dist, f"{name}() is printed without its class; {method.reason}, and the log shows {method.dist}", method.candidates)
    if resolved.dist and re.search(rf"\w\.{re.escape(name)}\(", source[:MAX_SOURCE]):
        return Resolved(
            "", f"{resolved.reason}, but the source line calls a method of that name, and the log shows nothing of {resolved.dist}", resolved.candidates
        )
    return None


def _calls_back(kind: str, name: str, module: str, resolved: Resolved) -> bool:
    """A call or an attribute of a named class or function that no indexed release defines (no candidate at all), and no
    module: what a library calls there is code it was handed."""
    return kind in ("keyword", "positional", "attribute") and not resolved.candidates and not module and _owner(name) not in ("", *_CONSTRUCTORS)


def _folded(raised: Raised, kind: str, member: str, callee: str, **around: Any) -> tuple[str, str] | None:
    """The caller where a notebook folded the frames that made the call (Colab's `8 frames` between the user's cell and
    the frame that refused it): no printed frame after the fold is the asker (an attribute's) or a caller outside the
    callee (a call's), so it is among the folded ones, below the call the frame above the fold makes. That call's
    package, where its name resolves to one the log shows or that name is distinctive (`get_peft_model(model, lora_config)`
    → peft), is the code that ran them; else the caller is not printed. None where a printed frame after the fold is the caller."""
    if raised.hidden is None or kind not in ("attribute", "keyword", "positional"):
        return None
    at, words, source = raised.hidden
    after = [f for f in raised.frames[at:] if not _looked_through(f)]
    if after and (kind == "attribute" or any(_dist(f) != callee for f in after)):
        return None
    if member and re.search(rf"\.{re.escape(member)}\b|\b{re.escape(member)}\s*=(?!=)", source):
        return None  # the line above the fold makes the very call or asks the very attribute (`pl.Trainer(gpus=…)`)
    seen = {canonical(d) for d in (*around.get("around", ()), *around.get("installed", ()))}
    found = {
        r.dist: (m.group("name"), r)
        for m in _CALL.finditer(source[:MAX_SOURCE])
        if (r := resolve(owner := _owner(m.group("name")), **around)).dist and (r.dist in seen or _distinctive(owner))
    }
    if len(found) != 1:
        return (
            "",
            f"the frame that asked is among the {words} the notebook folded; the line above them ({source.strip()[:80]}) calls no one package the index knows",
        )
    dist, (called, _) = next(iter(found.items()))
    return dist, f"the notebook folded {words} under the line `{source.strip()[:80]}`: they run inside {dist}'s {called}, which that line calls"


def _distinctive(name: str) -> bool:
    """A name of two words or more that one indexed distribution alone defines (`get_peft_model`, `LoraConfig`): a
    fingerprint of that package even where the log shows it nowhere else; a one-word name (`train`) is not."""
    words = [w for w in name.split("_") if w] if "_" in name else _HUMP.findall(name)
    return len(words) >= 2 and len(definers(name)) == 1


def _named_for(owner: str) -> Resolved | None:
    """A class in no indexed release whose name spells an indexed package's import name in its words
    (`FP16_DeepSpeedZeroOptimizer`: an older deepspeed's optimizer): that package's, from a release the index did not read.
    Names of six letters or more only: a short one (`ray`, `trl`) is a word of too many class names."""
    words = [w.lower() for part in owner.split("_") for w in _HUMP.findall(part)]
    packages = index().packages
    for i in range(len(words)):
        for j in range(i + 1, min(len(words), i + 4) + 1):
            name = "".join(words[i:j])
            if len(name) >= 6 and (dist := packages.get(name)) and dist in index().releases:
                return Resolved(dist, f"{owner} is in no indexed release; its name spells {name}: a class of {dist}'s, from another release")
    return None


def _base_with(owner: str, member: str, kind: str, shown: set[str]) -> Resolved | None:
    """A class in no index whose name ends in a one-word class several distributions define (`OurTrainer`, `CTCTrainer`:
    `Trainer`), asked for a member (or given a keyword): the base is the one of them whose classes have that member (take
    that keyword), or the one the others of those build on (ms-swift and trl on transformers). Two pieces of the message
    agree where several of those packages have it and all build on one (the origin of the class and its member), or the
    one is a package the log shows (its frames, the packages it states, the freeze): a `Telechat2Tokenizer` is no subclass
    of sglang's `Tokenizer` because sglang's classes alone have `apply_chat_template`. None where they do not single one
    out."""
    for base in _bases(owner):
        if len(_HUMP.findall(base)) != 1 or len(definers(base)) < 2:
            continue
        table: Table = "members" if kind == "attribute" else "keywords"
        having = resolve(member, table=table)
        both = [d for d in definers(base) if d in (having.candidates or (having.dist,))]
        top = [d for d in both if all(o == d or requires(o, d) for o in both)]
        if len(top) != 1 or (len(both) < 2 and top[0] not in shown):
            return None  # one package alone is no agreement unless the log shows it
        has = "have the member" if table == "members" else "take the keyword"
        said = f"of these the classes of {' and '.join(both)} {has} {member}" + (f" ({top[0]} under the others)" if len(both) > 1 else "")
        return Resolved(
            top[0],
            f"{owner} is in no indexed release; its name ends in {base} ({', '.join(definers(base))} define it), and {said}: a subclass of {top[0]}'s",
            tuple(both),
        )
    return None


def _project(caller: str, frames: list[Frame], dists: list[str]) -> str:
    """The user's project where the caller is the user's code: named by the innermost user frame's path (a class a
    library calls back into is not named so: the model's remote code is no frame of the user's project)."""
    if caller != "user":
        return ""
    return next((project_of(f.path) for f, d in zip(reversed(frames), reversed(dists), strict=True) if not d), "")


def _subclassed(owner: str, frames: list[Frame], dists: list[str]) -> Resolved | None:
    """A class of the user's own (in no index) asked for an attribute by the user's code: a subclass of a library's class
    (`'OurTrainer' object has no attribute 'deepspeed'`); that library is the one whose frame called into the user's
    methods (Trainer.train → the user's `_inner_training_loop`), where one did."""
    for i in range(len(frames) - 1, 0, -1):
        if not dists[i] and dists[i - 1]:
            outer = frames[i - 1]
            return Resolved(dists[i - 1], f"{owner} is the user's own class; {outer.where()} called into its methods, so it subclasses {dists[i - 1]}'s")
    return None


#: A word of a class name: an acronym (`GRPO` in `GRPOTrainer`) or a capitalised word.
_HUMP = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z][a-z0-9]+|[A-Z]+(?![a-z])")


def _bases(owner: str) -> Iterator[str]:
    """The class names a class's name ends in, longest first: each tail that starts with a capital inside the name, not
    after `_` (`XGRPOTrainer` → `GRPOTrainer`, `RPOTrainer`, …, `Trainer`)."""
    for at in range(1, len(owner) - 1):
        if owner[at].isupper() and owner[at - 1] != "_":
            yield owner[at:]


def _named_after(owner: str, **around: Any) -> Resolved | None:
    """A class no indexed release defines whose name ends in one an indexed release does (`XGRPOTrainer` → trl's
    `GRPOTrainer`, `OurDPOTrainer`): the user's subclass of it, asking for what the base class has. A one-word base
    (`Trainer`, `Model`) is too common a suffix to tell."""
    if definers(owner) or not owner[:1].isupper():
        return None
    for base in _bases(owner):
        if len(_HUMP.findall(base)) >= 2 and definers(base):
            found = resolve(base, **around)
            if not found.dist:
                return None
            return Resolved(found.dist, f"{owner} is in no indexed release; its name ends in {base} ({found.reason}): a subclass of it", found.candidates)
    return None


#: The package a range refusal tells the user to upgrade (`Try: `pip install transformers -U``): the one that checked.
_UPGRADE_HINT = re.compile(r"pip3? install (?:-U |--upgrade )?['\"`]?(?P<pkg>[A-Za-z][\w.-]*)['\"`]? (?:-U|--upgrade)\b")


def _range(raised: Raised, told: tuple[Stated, ...] = ()) -> Boundary | None:
    """A range statement (`deepspeed>=0.9.3 is required … but found deepspeed==0.8.3`, `trl requires transformers>=4.46`):
    the callee is the package required, the caller the one requiring it (named in the message, else the library whose
    frame raised it; printed without frames, the package the message's own hint says to upgrade, else the one package the
    log states that requires the callee or whose code imports it)."""

    stated = in_message(raised.value)
    if stated is None:
        return None
    frames = [f for f in raised.frames if not _looked_through(f)]
    if not stated.package:  # a minimum-version check names no package: the one whose frame raised it checked itself
        stated = replace(stated, package=next((d for d in map(_dist, reversed(frames)) if d), ""))
        if not stated.package:
            return None
    callee = _needed(stated)
    outside = [(f, _dist(f)) for f in reversed(frames) if _dist(f) and _dist(f) != callee]
    who = stated.said_by or next((m.group("who") for m in _REQUIRER.finditer(raised.value.split("\n", 1)[0]) if _known(m.group("who"))), "")
    if who and module_owner(who) != callee:
        caller, why = module_owner(who), f"the message says {who} needs it"
    elif outside:
        caller, why = outside[0][1], f"{outside[0][0].where()} states the range it needs"
    elif own := next((f for f in reversed(frames) if not _dist(f)), None):
        caller, why = "user", f"{own.where()} states the range it needs (your code)"
    elif not frames and (lazy := raised.importer or _lazy_module(raised.value)) and (checker := module_owner(lazy)) and checker != callee:
        caller, why = checker, f"the lazy-import wrapper names {lazy} as the module whose import checked it"
    elif not frames and (said := _hinted(raised.value, callee) or _stated_caller(callee, "", told) or _stated_user(callee, told)):
        caller, why = said
    else:
        caller, why = "", "the message does not say which package needs it, and no library frame is printed"
    return Boundary("range", stated.package, stated.needed, caller, why, callee, f"the message names {stated.package} as the package needed")


def _needed(stated: Range) -> str:
    """The distribution a range statement names as needed (`transformers[torch]>=4.46` → transformers)."""
    return module_owner(stated.package.split("[")[0]) or canonical(stated.package)


def of_stated(stated: Range) -> Boundary | None:
    """The boundary of a range a log states outside any exception (pip's resolver: `llamafactory 0.9.3 requires
    trl<=0.9.6,>=0.8.6, but you have trl 0.16.1 which is incompatible`): the package stating it is the caller, the one it
    names the callee. None where the statement names no other package as the one that needs it."""
    callee = _needed(stated)
    caller = (module_owner(stated.said_by) or canonical(stated.said_by)) if stated.said_by else ""
    if not caller or caller == callee:
        return None
    return Boundary(
        "range", stated.package, stated.needed, caller, f"{stated.said_by} states the range it needs", callee,
        f"the statement names {stated.package} as the package needed",
    )  # fmt: skip


def _hinted(value: str, callee: str) -> tuple[str, str] | None:
    """The checker of a range refusal printed without frames, by the upgrade its message advises (`… but found
    tokenizers==0.23.1. Try: `pip install transformers -U``): the package it tells to move is the one whose check it is."""
    m = _UPGRADE_HINT.search(" ".join(value.split("\n", MESSAGE_LINES)[:MESSAGE_LINES]))
    owner = (module_owner(m.group("pkg")) or canonical(m.group("pkg"))) if m else ""
    if not owner or owner == callee or owner not in index().releases:
        return None
    return owner, f"the message tells the user to upgrade {m.group('pkg') if m else owner}: the check is {owner}'s"


def _stated_user(callee: str, stated: Iterable[Stated]) -> tuple[str, str] | None:
    """The checker of a range printed without frames: the one package the log states whose own code imports the callee
    (an optional dependency its requirements do not list: llamafactory checks the vllm it imports)."""
    told = [s for s in stated if s.dist != callee and imports_from(s.dist, callee)]
    found = sorted({s.dist for s in told})
    if len(found) != 1:
        return None
    said = next(s for s in told if s.dist == found[0])
    return said.dist, f"no frame is printed; the log {said.said} {said.dist} ({said.quote()}), the one package it names whose code imports {callee}"


def _lazy_module(value: str) -> str:
    """The module a lazy-import wrapper's own message names (`Failed to import transformers.models.x because of …`)."""
    m = LAZY.search(" ".join(value.split("\n", 2)[:2]))
    return m.group("module") if m else ""


def _caller(kind: str, frames: list[Frame], dists: list[str], callee: str, importer: str = "", *, printed: bool = True) -> tuple[str, str]:
    """The caller's distribution ('user' for the user's code) and why; '' where frames were printed but none of the
    caller's (an excerpt cut above a library's frames). `importer`: the module a lazy-import wrapper names as the one whose
    import failed (transformers' `Failed to import X because of`); `printed`: whether the exception has any frame or
    source line at all (a message alone is the program's own failure as far as the log goes)."""
    if not frames and importer and kind in ("import_name", "submodule") and (owner := module_owner(importer)):
        return owner, f"{importer} imports it (the lazy-import wrapper that failed over it was importing {importer})"
    if not frames and importer:  # an attribute asked while importing: any module that import loaded may have asked
        return "", f"asked for while {importer} was imported; the asking frame is not printed"
    if not frames and not printed:  # the message alone: whatever ran it is the user's program, as far as the log goes
        return "user", "no frame is printed at all: the program that ran (your code, or a package it loaded: the log shows no more)"
    if not frames:
        return "", "no frame of the caller was printed"
    if kind == "attribute":  # the frame that asked (an accessor that refused is looked through)
        frame, dist = frames[-1], dists[-1]
        return dist or "user", f"{frame.where()} asked for the attribute"
    for frame, dist in zip(reversed(frames), reversed(dists), strict=True):
        if dist != callee or not callee:  # a callee not known: the last frame printed called it
            what = "imports it" if kind in ("import_name", "submodule") else "made the call"
            return dist or "user", f"{frame.where()} {what}: the last frame outside {callee or 'the callee'}'s own code"
    return callee, f"every frame printed is {callee}'s own code"
