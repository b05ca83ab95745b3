"""Cell-id patterns: fnmatch with brace lists (`*/{fp32,bf16}-sdpa`), bounded and compiled once.

Patterns come from matrix.yaml and the command line, so a hostile one must not cost more than a
bounded amount: `{a,b}` repeated 30 times would expand to 2**30 patterns. The number of
alternatives is counted on the parsed pattern (no expansion) and refused above MAX_EXPANSIONS; the
length of a pattern and the number of patterns in a selection are bounded too. A selection is
compiled into one regular expression, so matching a cell costs one search, not one per pattern.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable

MAX_PATTERN_CHARS = 256
MAX_EXPANSIONS = 256  # alternatives one pattern may expand to
MAX_PATTERNS = 1000  # patterns in one selection (select + --only, or skip + --skip)
MAX_SELECTION = 1024  # alternatives in one selection, braces expanded

# A pattern parsed: a sequence of literal text and brace groups; a group is a list of alternatives.
Seq = list["str | list[Seq]"]


class PatternError(ValueError):
    """A pattern beyond a bound; the message says which and what to write instead."""


def _pairs(pattern: str) -> dict[int, int]:
    """Matching `{`…`}` positions; an unmatched brace is a literal character (as fnmatch has it)."""
    stack: list[int] = []
    pairs: dict[int, int] = {}
    for i, ch in enumerate(pattern):
        if ch == "{":
            stack.append(i)
        elif ch == "}" and stack:
            pairs[stack.pop()] = i
    return pairs


def _parse(pattern: str, start: int, end: int, pairs: dict[int, int]) -> Seq:
    seq: Seq = []
    text = ""
    i = start
    while i < end:
        close = pairs.get(i)
        if close is None:
            text += pattern[i]
            i += 1
            continue
        if text:
            seq.append(text)
            text = ""
        alts: list[Seq] = []
        j = i + 1
        k = j
        while k < close:  # split on top-level commas inside the group
            inner = pairs.get(k)
            if inner is not None:
                k = inner + 1
            elif pattern[k] == ",":
                alts.append(_parse(pattern, j, k, pairs))
                j = k = k + 1
            else:
                k += 1
        alts.append(_parse(pattern, j, close, pairs))
        seq.append(alts)
        i = close + 1
    if text:
        seq.append(text)
    return seq


def _count(seq: Seq) -> int:
    total = 1
    for part in seq:
        if isinstance(part, list):
            total *= sum(_count(alt) for alt in part)
            if total > MAX_EXPANSIONS:  # stop early: the exact figure can be astronomically large
                return total
    return total


def _expand(seq: Seq) -> list[str]:
    out = [""]
    for part in seq:
        if isinstance(part, str):
            out = [o + part for o in out]
        else:
            alts = [x for alt in part for x in _expand(alt)]
            out = [o + a for o in out for a in alts]
    return out


def check(pattern: str) -> str | None:
    """Why a pattern is beyond the bounds, or None when it is within them."""
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"a pattern of {len(pattern)} characters is longer than {MAX_PATTERN_CHARS}; use '*' for the parts that vary"
    if _count(_parse(pattern, 0, len(pattern), _pairs(pattern))) > MAX_EXPANSIONS:
        return f"its brace lists expand to more than {MAX_EXPANSIONS} alternatives; use '*' or fewer {{a,b}} groups"
    return None


def expand_braces(pattern: str) -> list[str]:
    """`a-{x,y}-*` → [`a-x-*`, `a-y-*`]: brace alternatives for fnmatch, nested ones too; a pattern
    beyond the bounds raises PatternError."""
    problem = check(pattern)
    if problem:
        raise PatternError(f"'{pattern}': {problem}")
    return list(dict.fromkeys(_expand(_parse(pattern, 0, len(pattern), _pairs(pattern)))))


def compile_selection(patterns: Iterable[str]) -> re.Pattern[str] | None:
    """One regular expression matching a cell id that any pattern matches, or the id's environment
    part (`env` selects `env/*`); None for no patterns. Raises PatternError beyond the bounds."""
    pats = list(patterns)
    if len(pats) > MAX_PATTERNS:
        raise PatternError(f"{len(pats)} patterns in one selection, more than {MAX_PATTERNS}; use '*' and brace lists to say it in fewer")
    if not pats:
        return None
    expanded = dict.fromkeys(alt for p in pats for alt in expand_braces(p))
    if len(expanded) > MAX_SELECTION:
        raise PatternError(f"the patterns of one selection expand to {len(expanded)} alternatives, more than {MAX_SELECTION}; use '*' to say it in fewer")
    alts = [fnmatch.translate(alt) for alt in expanded]
    # fnmatch.translate gives `(?s:…)\Z`; `(?:/.*)?` lets a pattern naming an environment select its cells.
    return re.compile("|".join(f"(?:{a[:-2]}(?:/.*)?\\Z)" for a in alts), re.DOTALL)
