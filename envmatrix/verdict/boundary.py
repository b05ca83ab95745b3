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

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..facts.modules import STACK
from ..facts.nameindex import Resolved, canonical, index, module_owner, resolve
from .tracebacks import Frame, Raised

_KEYWORD = re.compile(
    r"(?P<name>[\w.<>]+)\(\) (?:got an unexpected keyword argument '(?P<member>\w+)'|got multiple values for (?:keyword )?argument '(?P<multi>\w+)'"
    r"|takes no keyword arguments)"
)
_POSITIONAL = re.compile(
    r"(?P<name>[\w.<>]+)\(\) (?:missing \d+ required (?:keyword-only |positional )?arguments?: '(?P<member>\w+)'"
    r"|takes (?:from )?\d+(?: to \d+)? positional arguments? but \d+ (?:were|was) given)"
)
_ATTRIBUTE = re.compile(
    r"(?:'(?P<cls>\w+)' object|module '(?P<mod>[\w.]+)'|type object '(?P<type>\w+)'|^(?P<bare>[A-Z]\w*)) has no attribute '?(?P<member>\w+)'?"
)
_IMPORT = re.compile(r"cannot import name '?(?P<member>\w+)'? from '?(?P<mod>[A-Za-z_][\w.]*)'?")
_SUBMODULE = re.compile(r"^No module named '?(?P<mod>[A-Za-z_]\w*(?:\.\w+)+)'?")
#: Functions that answer for another: an attribute one refuses was asked for by the frame that called it.
_ACCESSORS = frozenset({"__getattr__", "__getattribute__", "_getattr", "getattr"})


@dataclass(frozen=True)
class Boundary:
    """Both sides of the call an exception was raised at: what was called and what it lacked, the caller and the callee
    (distributions; `user` for the user's own code; '' where the log does not say), each with why."""

    kind: str  # keyword, positional, attribute, import_name, submodule
    name: str  # the called class or function, the object asked, or the module imported from
    member: str  # the keyword, attribute, or name imported ('' where the message names none)
    caller: str
    caller_reason: str
    callee: str
    callee_reason: str
    candidates: tuple[str, ...] = ()

    @property
    def own(self) -> bool:
        """The callee's own code called it: a package's own failure, not two releases that do not go together."""
        return bool(self.callee) and self.caller == self.callee

    @property
    def crossed(self) -> bool:
        return bool(self.callee) and bool(self.caller) and self.caller != self.callee

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "member": self.member or None,
            "caller": _who(self.caller) or None,
            "caller_reason": self.caller_reason,
            "callee": self.callee or None,
            "callee_reason": self.callee_reason,
        }


def _who(name: str) -> str:
    return "your code" if name == "user" else name


def _dist(frame: Frame) -> str:
    """A frame's distribution as the name index spells it ('' for the user's code)."""
    return module_owner(frame.module) if frame.package and frame.module else canonical(frame.package)


def _looked_through(frame: Frame) -> bool:
    return frame.package == "python" or frame.function in _ACCESSORS or frame.path.startswith("<frozen")


def _called(raised: Raised) -> tuple[str, str, str, str] | None:
    """(kind, called name, member, module or '') the message names, or None where it names no boundary."""
    text = raised.value.split("\n", 1)[0]
    types = raised.types
    if "TypeError" in types:
        if m := _KEYWORD.search(text):
            return "keyword", m.group("name"), m.group("member") or m.group("multi") or "", ""
        if m := _POSITIONAL.search(text):
            return "positional", m.group("name"), m.group("member") or "", ""
    if "AttributeError" in types and (m := _ATTRIBUTE.search(text)):
        if m.group("mod"):
            return "attribute", m.group("mod"), m.group("member"), m.group("mod")
        return "attribute", m.group("cls") or m.group("type") or m.group("bare"), m.group("member"), ""
    if {"ImportError", "ModuleNotFoundError"} & set(types):
        if m := _IMPORT.search(text):
            return "import_name", m.group("mod"), m.group("member"), m.group("mod")
        if (m := _SUBMODULE.search(text)) and _known(m.group("mod")):
            return "submodule", m.group("mod").split(".")[0], m.group("mod"), m.group("mod")
    return None


def _known(module: str) -> bool:
    top = module.split(".")[0]
    return top in index().packages or top in STACK


def _owner(name: str) -> str:
    """`Accelerator.__init__` → `Accelerator`; `GRPOTrainer.create_model_card` → `GRPOTrainer`; `unwrap_model` → itself."""
    parts = [p for p in name.split(".") if p and not p.startswith("<")]
    return parts[0] if parts else ""


def of(raised: Raised, *, installed: Mapping[str, str] | Iterable[str] = (), around: Iterable[str] = ()) -> Boundary | None:
    """The boundary an exception was raised at, or None when its message names no call, attribute or import."""
    called = _called(raised)
    if called is None:
        return None
    kind, name, member, module = called
    frames = [f for f in raised.frames if not _looked_through(f)]
    dists = [_dist(f) for f in frames]
    # the callee
    if module:
        if _known(module):
            callee, reason = module_owner(module), f"{module} is {module_owner(module)}'s module"
            resolved = Resolved(callee, reason, (callee,))
        else:
            resolved = Resolved("", f"{module} is no installed package's module the name index knows (the user's own, perhaps)")
    else:
        owner = _owner(name)
        asker = _caller(kind, frames, dists, "")[0]
        near = [*dists, *around]
        resolved = resolve(owner, caller=asker, installed=installed, around=near) if owner else Resolved("", f"{name} names no class or function")
    callee = resolved.dist
    caller, caller_reason = _caller(kind, frames, dists, callee)
    if caller == callee and raised.headless and kind != "attribute":  # an attribute's asker is printed; a call's may be cut
        caller, caller_reason = "", f"every frame printed is {callee}'s own code, and the excerpt starts after the caller's frames"
    return Boundary(kind, name, member, caller, caller_reason, callee, resolved.reason, resolved.candidates)


def _caller(kind: str, frames: list[Frame], dists: list[str], callee: str) -> tuple[str, str]:
    """The caller's distribution ('user' for the user's code) and why; '' where no frame was printed."""
    if not frames:
        return "", "no frame of the caller was printed"
    if kind == "attribute":  # the frame that asked (an accessor that refused is looked through)
        frame, dist = frames[-1], dists[-1]
        return dist or "user", f"{frame.where()} asked for the attribute"
    for frame, dist in zip(reversed(frames), reversed(dists), strict=True):
        if dist != callee:
            what = "imports it" if kind in ("import_name", "submodule") else "made the call"
            return dist or "user", f"{frame.where()} {what}: the last frame outside {callee or 'the callee'}'s own code"
    return callee, f"every frame printed is {callee}'s own code"
