"""Pure: read a missing-module failure: which module (or library) is missing, and which package imported it.

The module comes from the failure line in any of its wordings (Python's `No module named`, transformers'
`requires the X library`, `requires the following packages`, `requires `x>=1`: run pip install`,
importlib.metadata's `No package metadata was found`, `is not installed`, `cannot import name`); the
importer from the traceback before it: a lazy module's `Failed to import PKG.sub because of the following
error`, else the innermost frame under site-packages that is not the missing module itself.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..facts.modules import DISTRIBUTIONS, distribution, stack_package
from .tracebacks import LAZY, frame_of

_NAME = r"([A-Za-z_][\w.-]*?)"
_WORDINGS = (
    re.compile(r"No module named '?([A-Za-z_][\w.]*)'?"),
    re.compile(r"requires\s+the\s+(\S+)\s+library\s+but\s+it\s+was\s+not\s+found"),
    re.compile(r"not\s+found\s+in\s+your\s+envir\w*:\s*([A-Za-z_][\w.-]*)"),
    re.compile(r"requires\s+`?" + _NAME + r"(?:[<>=!~]=?[\w.*]+)?`?\s*:\s*(?:[Pp]lease\s+)?(?:run|install)"),
    re.compile(r"No package metadata was found for\s+([A-Za-z_][\w.-]*)"),
    re.compile(r"package\s+`?([A-Za-z_][\w.-]*)`?\s+seems\s+to\s+be\s+not\s+installed"),
    re.compile(r"`?([A-Za-z_][\w.-]*)`?\s+is\s+not\s+installed"),
)
_REMOTE = re.compile(r"This\s+modeling\s+file\s+requires\s+the\s+following\s+packages")
_SUBJECT = re.compile(r"([A-Za-z_]\w*)\s+requires\s+the\s+\S+\s+library")
_CANNOT = re.compile(r"cannot import name '?(\w+)'? from '?([A-Za-z_][\w.]*)'?")
_FRAME = re.compile(r'File "(?P<path>[^"\n]{1,1000})", line \d+')


@dataclass(frozen=True)
class Missing:
    """A missing module (or a name a module lacks) and what imported it, as far as the log says."""

    module: str
    name: str | None = None  # `cannot import name NAME from MODULE`
    importer: str | None = None
    package: bool = True  # the importer is an installed package (a pin can fix it), not a class or remote code
    nowhere: bool = False  # `(unknown location)`: Python found a folder of that name, not the installed package

    @property
    def install(self) -> str:
        """The distribution to install for the module."""
        return distribution(self.module)


#: A package's own module made when it is built: compiled, by the names extensions take (`vllm._C`, `mmcv._ext`,
#: `tensorrt_llm.bindings`), or written by the build (setuptools-scm's `vllm._version`): missing, it was never built (a
#: source checkout, a broken install), not moved by a release. rules.txt reads it too.
COMPILED_MODULE = r"_\w*(?:C|_?ext|cuda|kernels?|ops|cpp)|_?bindings|_version"


def read_missing(line: str, context: Sequence[str] = ()) -> Missing | None:
    """The missing module named on a failure line, with its importer from the lines before it; None when the
    line names no module in a known wording."""
    cannot = _CANNOT.search(line)
    if cannot:
        module, name = cannot.group(2), cannot.group(1)
    else:
        found = next((m.group(1) for w in _WORDINGS if (m := w.search(line))), None)
        if found is None:
            return None
        module, name = found.strip("`'\".,"), None
    if _REMOTE.search(line):  # transformers checked a model's own code (trust_remote_code) for its imports
        return Missing(module, name, "the model's remote code", package=False)
    if subject := _SUBJECT.search(line):  # `AutoModelForCausalLM requires the PyTorch library`
        return Missing(module, name, subject.group(1), package=False)
    return Missing(module, name, importer(context, module), nowhere="(unknown location)" in line)


def importer(context: Sequence[str], module: str) -> str | None:
    """The package that imported `module`: the lazy-import message if the traceback has one, else the
    innermost frame of an installed package or a stack checkout (tracebacks.frame_of) outside the module itself."""
    top = distribution(module)
    for line in reversed(context):
        if m := LAZY.search(line):
            return m.group("module").split(".")[0]
    for line in reversed(context):
        if (m := _FRAME.search(line)) and (package := frame_of(m.group("path"), None, "").package) not in ("", "python", top, "importlib"):
            return package
    return None


def remedy(missing: Missing) -> str:
    """What to do, naming the module, what provides it and the package that imports it."""
    who = missing.importer
    if missing.nowhere:
        return (
            f"{missing.module} is not installed: Python found a folder named {missing.module.split('.')[0]} on its path, not the "
            f"package (`unknown location`); install {missing.install} in this environment, or rename that folder"
        )
    if missing.name is not None:
        return (
            f"{missing.module} has no {missing.name}: the installed {missing.install} and "
            f"{who or 'the code importing it'} are releases that do not go together; pin {missing.install} to the range "
            f"{who or 'that code'} supports, or upgrade {who or 'it'}"
        )
    top, _, sub = missing.module.partition(".")
    if not (stack_package(top) or top in DISTRIBUTIONS):
        sub = ""  # a folder of the user's own, perhaps: say no more than the log does
    first = sub.split(".")[0]
    if sub and (first.startswith("_") or re.fullmatch(COMPILED_MODULE, first)):  # `vllm._C`: compiled, or private to it
        return (
            f"{top} is installed but its compiled module {missing.module} is not: a source checkout or a broken install; "
            f"reinstall the {missing.install} wheel built for this Python, torch and CUDA"
        )
    if sub:  # Python names the first part that is missing: `top` itself imported
        return (
            f"{top} is installed, but this release of {missing.install} has no module {missing.module}: "
            f"{who or 'the code importing it'} was written for another release; install the {missing.install} release it was "
            f"written for, or upgrade {who or 'that code'}"
        )
    pin = f", or pin {who} to a release that works with this stack without it" if who and missing.package else ""
    return f"{missing.module} is not installed and {who or 'the code'} imports it: install it (pip install {missing.install}){pin}"
