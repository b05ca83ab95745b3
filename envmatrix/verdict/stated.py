"""What a log states about the packages around a failure: the versions it lists (`transformers 4.49.0`,
`- **vLLM version**: 0.11.0`, `peft-0.5.0`, `trl版本0.12.0`), the imports and calls of the code it shows
(`from peft import PeftModel`, `deepspeed.initialize(model)`), the launcher it ran (`llamafactory-cli train`,
`python -m verl.trainer.main_ppo`), the links to a line of its source, and, weakest, the packages its prose names (`the original code in verl assumed…`). An
exception pasted without its frames says nothing of who made the call; these statements are what the log says instead
(boundary.py takes the one stated package that requires the callee, the code's statements first, the prose's last).

Only the indexed distributions are read (nameindex.json: the ones whose requirements are known), under their names,
their import packages of the training stack and the spellings users write (facts/modules.SPELLINGS). The pattern is
RE2 syntax: logscan.py compiles it into its single pass.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from ..facts.modules import SPELLINGS, STACK
from ..facts.nameindex import canonical, index

#: How a package was stated, by the pattern's group: a version listed, an import, a call in code, a launcher, a word of prose.
HOW = {
    **{"st_v": "version", "st_f": "import", "st_i": "import", "st_c": "call"},
    **{"st_l": "launch", "st_m": "launch", "st_s": "launch", "st_t": "launch", "st_u": "link", "st_p": "named"},
}


QUOTE_CHARS = 160


@dataclass(frozen=True)
class Stated:
    """One statement of an installed distribution: which, how (HOW's values), and the line that says it."""

    dist: str
    how: str
    line_no: int
    line: str

    def quote(self) -> str:
        """`line 3: from peft import PeftModel` (a long line shortened: it is a reason's quote, not evidence)."""
        line = self.line if len(self.line) <= QUOTE_CHARS else self.line[: QUOTE_CHARS - 1] + "…"
        return f"line {self.line_no}: {line}"

    @property
    def said(self) -> str:
        """How the log says it, as a verb: `lists` a version, `imports`, `calls`, `runs`, `names` in its prose."""
        return {"version": "lists", "import": "imports", "call": "calls", "launch": "runs", "link": "links the source of"}.get(self.how, "names")

    @property
    def code(self) -> bool:
        """An import, call or launcher in the code the log shows, rather than a version in a list or a word in prose."""
        return self.how not in ("version", "named")


@dataclass(frozen=True)
class Shown:
    """A class the log's code constructs (`args = TrainingArguments(` …), the keywords its call passes, and the line it
    starts on: the call an `__init__()` printed without its class refused, where no frame shows it."""

    name: str
    keywords: tuple[str, ...]
    line_no: int


def closing(text: str, opened: int) -> int:
    """Where the parenthesis at `opened` closes in `text` (its length where the text ends first): code's call spans lines
    and nests, so the keywords it passes are the ones inside that span."""
    depth = 0
    for i in range(opened, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    return len(text)


@cache
def _names() -> dict[str, str]:
    """Every written form read (folded by canonical) → its indexed distribution."""
    found = index()
    names = {canonical(d): d for d in found.releases}
    names |= {canonical(p): d for p, d in found.packages.items() if p in STACK and d in found.releases}
    names |= {k: v for k, v in SPELLINGS.items() if v in found.releases}
    return names


def dist_of(written: str) -> str:
    """The indexed distribution a written name (or console script) stands for ('' for none): `vLLM` → vllm, `llama
    factory` → llamafactory, `swift` → ms-swift."""
    return _names().get(canonical(written.replace(" ", "-")), "") or index().scripts.get(written, "")


@cache
def pattern() -> str:
    """One RE2 alternation of the forms, each naming the package in its own group (HOW's keys)."""
    spelled = sorted(_names(), key=len, reverse=True)  # the longest first: `flash-attn` before `flash`
    alt = "(?i:" + "|".join(n.replace("-", "[ _.-]?") for n in spelled) + ")"
    version = rf"\b(?P<st_v>{alt})(?:[ _-]?(?i:version)|版本)?[ \t*`'\":=<>~!(-]{{0,40}}v?\d+\.\d+"
    # `from x import` anywhere (a statement quoted in prose); a bare `import x` only where a statement starts (not the prose
    # of `Failed to import transformers.models…`)
    imported = rf"\bfrom[ \t]+(?P<st_f>{alt})(?:\.\w+)*[ \t]+import\b|(?m:^)[ \t]*(?:>>>[ \t]*)?import[ \t]+(?P<st_i>{alt})\b"
    called = rf"\b(?P<st_c>{alt})(?:\.[A-Za-z_]\w*)+\("
    launched = rf"\b(?P<st_l>{alt})-cli\b|(?:^|[ \t])-m[ \t]+(?P<st_m>{alt})\b"
    # a console script the wheels install (nameindex.json `scripts`) where a command starts, after environment assignments,
    # on a line that reads as a command, not prose that starts with the package's name: after a shell prompt, or with an
    # option or a continuation (`CUDA_VISIBLE_DEVICES=0 swift sft \`, `$ vllm serve Qwen/…`, `trl grpo --model …`)
    scripts = "|".join(re.escape(s) for s in sorted(index().scripts, key=len, reverse=True))
    env = r"(?:[A-Z_][A-Z0-9_]*=\S*[ \t]+)*"
    command = (
        rf"(?m:^)[ \t>]*(?:\$[ \t]*{env}(?P<st_s>{scripts})[ \t]+\S"
        rf"|{env}(?P<st_t>{scripts})[ \t]+(?:[a-z][\w-]*[ \t]+)?(?:--?[A-Za-z][^\n]*|[^\n]*\\[ \t]*(?m:$)))"
    )
    # a link to a line of a package's own source (`github.com/microsoft/DeepSpeed/blob/ffb53c2/deepspeed/elasticity/…py#L9`),
    # or that file's path in the package (`swift/llm/infer/infer_engine/vllm_engine.py`, not an installed copy's full path):
    # the code the user shows making the call
    linked = rf"(?:github\.com/[\w.-]+/[\w.-]+/blob/[\w.-]+/|(?m:^)|[ \t`'\"(\[])(?:src/)?(?P<st_u>{alt})/[\w/.-]*\.py\b"
    # a package named in the prose around (`The original code in verl assumed…`, `LLaMaFactory源码里`): a word of its own
    # (Chinese runs words together), not a path or a module
    named = rf"(?:(?m:^)|[ \t(`'\"*]|[^\x00-\x7f])(?P<st_p>{alt})(?:[ \t)`'\"*,:;!?]|\.(?:[ \t]|(?m:$))|(?m:$)|[^\x00-\x7f])"
    return "|".join(f"(?:{p})" for p in (version, imported, called, launched, command, linked, named))
