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

from ..facts.modules import distribution

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
_LAZY = re.compile(r"Failed to import ([A-Za-z_]\w*)\.[\w.]+ because of the following error")
_FRAME = re.compile(r'File "[^"]*?[/\\](?:site|dist)-packages[/\\]([A-Za-z_]\w*)[/\\.]')


@dataclass(frozen=True)
class Missing:
    """A missing module (or a name a module lacks) and what imported it, as far as the log says."""

    module: str
    name: str | None = None  # `cannot import name NAME from MODULE`
    importer: str | None = None
    package: bool = True  # the importer is an installed package (a pin can fix it), not a class or remote code

    @property
    def install(self) -> str:
        """The distribution to install for the module."""
        return distribution(self.module)


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
    return Missing(module, name, importer(context, module))


def importer(context: Sequence[str], module: str) -> str | None:
    """The package that imported `module`: the lazy-import message if the traceback has one, else the
    innermost site-packages frame outside the module itself."""
    top = module.split(".")[0]
    for line in reversed(context):
        if m := _LAZY.search(line):
            return m.group(1)
    for line in reversed(context):
        if (m := _FRAME.search(line)) and m.group(1) not in (top, "importlib"):
            return m.group(1)
    return None


def remedy(missing: Missing) -> str:
    """What to do, naming the module, what provides it and the package that imports it."""
    who = missing.importer
    if missing.name is not None:
        return (
            f"{missing.module} has no {missing.name}: the installed {missing.install} and "
            f"{who or 'the code importing it'} are releases that do not go together; pin {missing.install} to the range "
            f"{who or 'that code'} supports, or upgrade {who or 'it'}"
        )
    pin = f", or pin {who} to a release that works with this stack without it" if who and missing.package else ""
    return f"{missing.module} is not installed and {who or 'the code'} imports it: install it (pip install {missing.install}){pin}"
