"""The verdict's rules over exceptions, read from `rules.txt`: one rule a line, applied in order, the first whose matchers
all hold names the exception's outcome (as Sentry's stack-trace and fingerprint rules judge an event by its frames and
exception, not by its wording).

A rule is `OUTCOME:VARIANT  MATCHER…`; a matcher is `KEY:VALUE`, `!KEY:VALUE` negates it. VALUE is a comma list of globs (`*` any text,
`?` one character; case-insensitive for messages), a `/regex/` (searched in the text), or for the package keys a comma
list of distribution names (`''` for the user's own code). `{name}` in a value is replaced by a vocabulary generated from the fact tables
(`VOCABULARY`). Keys:

- `error.type`   the exception type, or the type it wraps, dotted or by its last part (`torch.OutOfMemoryError`)
- `error.value`  the message, with the lines it goes on over
- `error.package`  the distribution of the frame that raised (`''` for the user's own code)
- `error.module`   that frame's module (`deepspeed.runtime.zero.*`)
- `error.caller`   the distribution that called into the raising one (`user` for the user's code)
- `error.code`     the outcome of a library error code the message names (CUDA, NCCL, cuBLAS: facts/errorcodes.py)
- `error.ignored`  `yes` for an exception printed while Python tore down (`Exception ignored in`)
- `error.stack`    `none` (no frames printed), `user` (frames of the user's code and Python's only), `package`
- `error.boundary` the call boundary the message names (boundary.py): `crossed` (one distribution called another), `own`
                   (a package's own code called itself), `unknown` (a side the log does not say), `none` (no call named);
                   also `indexed` where the name index says a release of the callee defines the name (`cannot import name`),
                   `private` where the name is imported from a package's private module (`torch._six`)
- `error.bare`     `yes` for an exception's message printed alone, without its type (`cannot import name 'X' from 'trl'`)
- `error.undefined` `library` for a NameError over a name one other distribution defines (a guarded import that did not run),
                   also `present` where that distribution is installed all the same (boundary.present): its release lacks it
- `frame.package`, `frame.module`, `frame.function`, `frame.path`: any frame

The outcome `@code` means "the outcome of the code the message names"; an outcome written `name?` is a fallback, used only
when nothing more specific explains the run. Rules are parsed once; a rule that names an
unknown outcome, key or vocabulary is an error at import, caught by the tests.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

from ..facts import catalog, enginefailures, errorcodes, modules
from ..facts.nameindex import index
from ..records.outcomes import OUTCOME_NAMES
from . import boundary
from .imports import COMPILED_MODULE
from .ranges import in_message
from .tracebacks import TAKES, Raised

RULES_FILE = Path(__file__).with_name("rules.txt")
CODE = "@code"


def _arch_words() -> str:
    """GPU names, architecture families and `sm_NN` forms: what a message names when it speaks of the GPU's kind."""
    names = sorted({g.name for g in catalog.GPUS.values() if g.compute_capability} | set(catalog.ARCHITECTURES), key=len, reverse=True)
    return r"(?:compute capability|capability|sm_?\d{2,3}a?\b|\barch(?:itecture)?s?\b|" + "|".join(rf"\b{re.escape(n)}\b" for n in names) + ")"


def _gpu_refused() -> str:
    """A GPU's kind named with a refusal or a requirement, in either order (`Bfloat16 is only supported on GPUs with
    compute capability of at least 8.0`, `type fp8e4nv not supported in this architecture`, `FlashAttention only supports
    Ampere GPUs or newer`, `requires device with capability > (8, 0) … (too old)`)."""
    kind = _arch_words()
    refusal = (
        r"(?:not supported|unsupported|not compatible|incompatible|too old|only supports?|only supported|requires?|required|needs?"
        r"|at least|or newer|or above|or higher|>=?\s*\(?\d)"
    )
    return rf"{kind}[^\n]{{0,120}}{refusal}|{refusal}[^\n]{{0,80}}{kind}"


def _engine_modules() -> str:
    mods = [m for layer in enginefailures.LAYERS for m in layer.modules]
    return "/^(?:" + "|".join(re.escape(m) for m in mods) + r")(?:\.|$)/"


def _engine_names() -> str:
    words = [w for layer in enginefailures.LAYERS for w in layer.words]
    return r"(?-i:\b(?:" + "|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True)) + r")\b)"  # names keep their case


def _known_package() -> str:
    """Import names of known distributions (facts/modules.KNOWN_IMPORTS): a module Python names is one of them."""
    names = sorted(modules.KNOWN_IMPORTS, key=len, reverse=True)
    return "(?:" + "|".join(re.escape(n) for n in names) + ")"


def _model_types() -> str:
    """transformers' model types as its config classes name them (`Qwen2MoeConfig` → `qwen2_moe`, `qwen2moe`), from the name
    index's releases: a KeyError over one of them is an auto mapping that does not know it (a release older than the model)."""
    stems = [n[: -len("Config")] for n, dists in index().definers.items() if n.endswith("Config") and "transformers" in dists]
    forms = {form for stem in stems if len(stem) >= 3 for form in (stem.lower(), "_".join(_HUMPS.findall(stem)).lower())}
    return "(?:" + "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True) if f) + ")"


_HUMPS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z]+")


#: Words a rule may use as `{name}`: the failure's vocabulary in the words of many layers (written once here), and the
#: names generated from the fact tables (GPUs and architectures, engine layers) so that the vocabulary grows with them.
#: RE2-compatible (no look-around, no back-references): the log scanner compiles some into its single pass.
VOCABULARY: dict[str, Callable[[], str]] = {
    "gpu_kind": _arch_words,
    "known_package": _known_package,
    "takes": lambda: TAKES,  # Python's refusal of too many positional arguments (tracebacks.py owns its wording)
    "model_types": _model_types,
    "gpu_refused": _gpu_refused,
    "engine_modules": _engine_modules,
    "engine_names": _engine_names,
    "memory_short": lambda: (
        r"out of memory|\bOOM\b|not enough (?:\w+ )?memory|insufficient (?:\w+ )?memory|no (?:available|free) memory|ran out of memory"
        r"|memory (?:is )?exhausted|requires more (?:\w+ )?memory|running low on memory|low on memory|cannot allocate memory|failed to allocate (?:\w+ )?memory"
        r"|memory allocation (?:of [\d,]+ bytes )?failed|(?:kv cache|cache blocks)[^\n]{0,80}(?:too small|not enough|insufficient|exceed|larger than)"
        r"|(?:larger|more) than[^\n]{0,80}(?:kv cache|cache blocks|available memory)|free memory[^\n]{0,160}(?:less than|lower than)"
    ),
    "possible_causes": lambda: r"(?:potential|possible|common) (?:root )?causes?\b|(?:may|might|could) (?:have )?been (?:killed|caused)",
    "memory_figures": lambda: (
        r"running low on memory|memory usage threshold|memory on the node[^\n]{0,80}\d|\d+(?:\.\d+)?\s?[GM]i?B\s?/\s?\d+(?:\.\d+)?\s?[GM]i?B"
    ),
    "driver_old": lambda: (
        r"driver[^\n]{0,80}(?:too old|is insufficient|older than|not supported|mismatch|requires? (?:a )?newer|update (?:your|the))"
        r"|(?:unsupported|newer) (?:ptx )?toolchain|requires? a newer (?:cuda |nvidia )?driver"
    ),
    "compiled_module": lambda: COMPILED_MODULE,
    "dropped": lambda: boundary.DROPPED.pattern,
    "not_installed": lambda: (
        r"(?:is|are) not installed|not installed\b|(?:is|are) not available|could not be (?:found|imported)|not found in your envir"
        r"|no module named|please install|\bpip3? install|conda install|requires the \S+ (?:library|package)"
        r"|seems to be not installed|missing (?:dependenc|package|module)|install (?:it|them) (?:with|via|using)"
        r"|(?:requires?|needs?) `?[\w.-]+`? to be installed"
    ),
}


@dataclass(frozen=True)
class Matcher:
    key: str
    test: Callable[[str], bool]
    negate: bool
    text: str

    def holds(self, raised: Raised) -> bool:
        return self._any(raised) != self.negate

    def _any(self, raised: Raised) -> bool:
        return any(self.test(value) for value in _values(self.key, raised))


@dataclass(frozen=True)
class Rule:
    """One line of rules.txt: the outcome it names, its variant (the rule's name in evidence), its matchers."""

    outcome: str
    variant: str
    matchers: tuple[Matcher, ...]
    line_no: int
    fallback: bool = False  # names the exception only when nothing more specific explains the run

    def matches(self, raised: Raised) -> bool:
        return all(m.holds(raised) for m in self.matchers)

    @property
    def name(self) -> str:
        return f"{self.outcome}:{self.variant}"


def _frames(raised: Raised, attr: str) -> list[str]:
    return [str(getattr(f, attr)) for f in raised.frames]


@lru_cache(maxsize=256)
def _boundary_flags(raised: Raised) -> tuple[str, ...]:
    """`error.boundary`'s values for one exception: its side (none, own, crossed, unknown) and what the boundary is
    (indexed, uncovered, private, misspelt, unrelated, self). Read once per exception, however many rules ask (boundary.of is
    the costly part of judging it)."""
    crossed = boundary.of(raised)
    side = "none" if crossed is None else "own" if crossed.own else "crossed" if crossed.crossed else "unknown"
    if crossed is None:
        return (side,)
    # `indexed`: a release of the callee the index read defines the name; `uncovered`: the callee is a known
    # distribution the index does not read (scipy), so no release list can say it never had the name
    private = crossed.kind == "import_name" and crossed.callee not in ("", "user") and re.search(r"\._[a-z]", crossed.name) is not None
    flags = (
        (["indexed"] if crossed.indexed else [])
        + (["uncovered"] if crossed.uncovered else [])
        + (["private"] if private else [])
        + (["misspelt"] if crossed.misspelt else [])
        + (["unrelated"] if crossed.unrelated else [])
        # `self`: the package's own module imports from its own top level (apex's `transformer/log_util.py` importing from an
        # `apex` that is a folder with no `__init__`): the package itself is not installed whole, whoever called it
        + (["self"] if crossed.kind == "import_name" and raised.package and raised.package == crossed.callee else [])
    )
    return (side, *flags)


def _values(key: str, raised: Raised) -> list[str]:
    match key:
        case "error.type":
            return list(raised.types)
        case "error.value":
            return [raised.value]
        case "error.package":
            return [raised.package]
        case "error.module":
            return [f.module for f in reversed(raised.frames) if f.package == raised.package][:1] or [""]
        case "error.caller":
            return [raised.caller]
        case "error.code":  # the message's own line: a code on the lines after it may belong to another message
            codes = errorcodes.find(raised.value.split("\n", 1)[0])
            return [c.outcome for c in codes] + [c.name for c in codes]
        case "error.boundary":
            return list(_boundary_flags(raised))
        case "error.bare":
            return ["yes" if raised.bare else "no"]
        case "error.undefined":
            found = boundary.guarded(raised)
            return ["none"] if found is None else ["library", "present"] if boundary.present(raised, found[1]) else ["library"]
        case "error.range":  # the package's own statement of the range it needs (ranges.py, the one reader of them)
            return ["stated"] if in_message(raised.value) is not None else ["none"]
        case "error.ignored":
            return ["yes" if raised.ignored else "no"]
        case "error.stack":
            return ["none" if not raised.frames else "package" if any(f.package not in ("", "python") for f in raised.frames) else "user"]
        case "frame.package":
            return _frames(raised, "package")
        case "frame.module":
            return _frames(raised, "module")
        case "frame.function":
            return _frames(raised, "function")
        case "frame.path":
            return _frames(raised, "path")
    raise AssertionError(key)  # keys are checked when the rules are parsed


KEYS = (
    "error.type", "error.value", "error.package", "error.module", "error.caller", "error.code", "error.ignored", "error.stack", "error.boundary", "error.bare",
    "error.undefined", "error.range",
    "frame.package", "frame.module", "frame.function", "frame.path",
)  # fmt: skip
_CASELESS = ("error.value", "frame.path")
_PACKAGES = ("error.package", "error.caller", "frame.package")


def _test(key: str, value: str) -> Callable[[str], bool]:
    value = re.sub(r"\{(\w+)\}", lambda m: VOCABULARY[m.group(1)](), value)
    if len(value) >= 2 and value.startswith("/") and value.endswith("/"):
        pattern = re.compile(value[1:-1], re.I if key in _CASELESS else 0)
        return lambda text: pattern.search(text) is not None
    if key in _PACKAGES:
        names = {"" if n.strip() == "''" else n.strip() for n in value.split(",")}
        return lambda text: text in names
    globs = [g.lower() if key in _CASELESS else g for g in value.split(",")]
    if key in _CASELESS:
        return lambda text: any(fnmatch.fnmatchcase(text.lower(), g) for g in globs)
    return lambda text: any(fnmatch.fnmatchcase(text, g) for g in globs)


_TOKEN = re.compile(r'(!?)([\w.]+):("(?:[^"\\]|\\.)*"|/(?:[^/\\]|\\.)*/|\S+)')


def parse(text: str, source: str = "rules.txt") -> tuple[Rule, ...]:
    """The rules of a rules file; ValueError naming the line for anything it cannot read."""
    rules = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        head, _, rest = line.partition(" ")
        outcome, _, variant = head.partition(":")
        fallback = outcome.endswith("?")
        outcome = outcome.removesuffix("?")
        if outcome != CODE and outcome not in OUTCOME_NAMES:
            raise ValueError(f"{source}:{no}: unknown outcome {outcome!r}")
        matchers = []
        pos = 0
        rest = rest.strip()
        while pos < len(rest):
            m = _TOKEN.match(rest, pos)
            if m is None:
                raise ValueError(f"{source}:{no}: cannot read matcher at {rest[pos:]!r}")
            negate, key, value = m.group(1) == "!", m.group(2), m.group(3)
            if key not in KEYS:
                raise ValueError(f"{source}:{no}: unknown key {key!r}; keys: {', '.join(KEYS)}")
            if value.startswith('"'):
                value = value[1:-1].replace('\\"', '"')
            try:
                matchers.append(Matcher(key, _test(key, value), negate, m.group(0)))
            except (re.error, KeyError) as exc:
                raise ValueError(f"{source}:{no}: {m.group(0)}: {exc}") from None
            pos = m.end()
            while pos < len(rest) and rest[pos] == " ":
                pos += 1
        if not matchers:
            raise ValueError(f"{source}:{no}: a rule needs at least one matcher")
        rules.append(Rule(outcome, variant or "rule", tuple(matchers), no, fallback))
    return tuple(rules)


@cache
def rules() -> tuple[Rule, ...]:
    return parse(RULES_FILE.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Judged:
    """An exception with the rule that named it (None: no rule did, so it is a plain `error`)."""

    raised: Raised
    outcome: str
    rule: Rule | None

    @property
    def variant(self) -> str:
        return self.rule.name if self.rule else "error:unmatched"

    @property
    def fallback(self) -> bool:
        """Named by a fallback rule or by none: weaker evidence than any specific rule."""
        return self.rule is None or self.rule.fallback or self.rule.variant == "teardown"


def judge(raised: Raised) -> Judged:
    """The first rule that matches names the outcome; `@code` takes the outcome of the code the message names."""
    for rule in rules():
        if rule.matches(raised):
            if rule.outcome == CODE:
                codes = errorcodes.find(raised.value)
                outcome = next((c.outcome for c in codes if c.outcome != "error"), codes[0].outcome if codes else "error")
                return Judged(raised, outcome, rule)
            return Judged(raised, rule.outcome, rule)
    return Judged(raised, "error", None)
