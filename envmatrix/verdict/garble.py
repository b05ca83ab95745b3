"""Is generated text garbled? One measure for the probe's sample texts and for text found in user logs.

Broken attention does not produce one fixed pattern: runs of one word (`in in in …`), of a special token
(`<|im_start|>` × 50), of one token id (`151644, 151644, …`), of one character (`!!!!`, `0000`), text
that is mostly one phrase, or letters from several scripts at once. So this measures the text, not a
pattern. Tokens are words, numbers and special tokens. Text of at least MIN_TOKENS tokens is garbled when

- one token repeats back to back RUN_LIMIT (16) times or more, or
- the most common token is TOP_SHARE (0.5) or more of all tokens, or
- REPEAT_SHARE (0.6) or more of its 3-grams repeat an earlier 3-gram (mostly one phrase), or
- its letters come from 3 or more scripts, each SCRIPT_SHARE (0.15) of them or more, or
- its letters come from 3 or more scripts and a word glues letters of two of them that no writing joins inside a word
  (`Gฉrucieleory`, `obligationsankerกระจายiente`): tokens drawn at random from a multilingual vocabulary are concatenated
  without spaces, while text that mixes scripts keeps them apart, but for Latin inside Chinese, Japanese or Korean words
  (`使用pip安装`, `GPU를`), which is allowed;

and any text is garbled with a run of CHAR_RUN (24) of one letter, digit, `!`, `?` or blank box (`□`: a token with no glyph), and any shorter text that is one
token and nothing else, WHOLE_RUN (8) times or more (` is is is is is is is is is is`, ten equal token ids: an engine
that emits one token for every step), or 3 times or more for a token that is never text (`<unk><unk><unk>…`).

The thresholds were chosen on tests/data/real-logs (tests/unit/verdict/test_classify_garble.py re-checks them):
on every line of the 57 non-garbled excerpts the largest values are a back-to-back run of 2, a top-token
share of 0.41 (a table row of zeros), a 3-gram repeat share of 0.26 (a Windows path) and 1 script;
the 4 garbled excerpts show runs of 60 to 191, or (`<|im_start|>\\n` alternating) 90% repeated 3-grams.
The thresholds sit between, nearer the healthy side for runs (16: the old id-repeat rule) and shares.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

MIN_TOKENS = 16
RUN_LIMIT = 16
TOP_SHARE = 0.5
REPEAT_SHARE = 0.6
SCRIPT_SHARE = 0.15
CHAR_RUN = 24
WHOLE_RUN = 8
#: Special tokens a model emits as output only when generation is broken (the unknown and padding tokens).
NEVER_TEXT = frozenset({"<unk>", "<UNK>", "<pad>", "<PAD>"})
NOT_TEXT = 0.02  # a larger share of undecodable bytes (U+FFFD) is binary noise, not text a model wrote
MAX_CHARS = 1 << 14  # a longer text is judged on its first 16 KiB: the measure stays cheap on any input

_TOKEN = re.compile(r"<\|?[^\s<>|]{1,40}\|?>|\w+")
#: `□` and `▯`: the blank box a terminal or a paste shows for a token that decodes to no printable glyph.
_CHAR_RUN = re.compile(r"([^\W_]|[!?\u25a1\u25af])\1{" + str(CHAR_RUN - 1) + "}")
_SCRIPT_ALIASES = {"HIRAGANA": "CJK", "KATAKANA": "CJK", "HALFWIDTH": "CJK", "FULLWIDTH": "LATIN"}
#: Scripts that real writing joins inside one word: Latin words and particles run into Chinese, Japanese and Korean text.
_JOINED = {"LATIN", "CJK", "HANGUL"}


@dataclass(frozen=True)
class Garble:
    """Why a text was judged garbled, in words a user can check against the text."""

    reason: str


def _script(ch: str) -> str:
    script = unicodedata.name(ch, "UNKNOWN").split(" ")[0]
    return _SCRIPT_ALIASES.get(script, script)


def _scripts(text: str) -> Counter[str]:
    return Counter(_script(ch) for ch in text if ch.isalpha())


def _glued(tokens: list[str]) -> str | None:
    """The first word whose letters come from two scripts that writing never joins inside a word."""
    for tok in tokens:
        scripts = {_script(ch) for ch in tok if ch.isalpha()}
        if len(scripts) > 1 and not scripts <= _JOINED:
            return tok
    return None


def _longest_run(tokens: list[str]) -> tuple[int, str]:
    best, best_tok, run = 0, "", 0
    for i, tok in enumerate(tokens):
        run = run + 1 if i and tokens[i - 1] == tok else 1
        if run > best:
            best, best_tok = run, tok
    return best, best_tok


def garbled(text: str) -> Garble | None:
    """The reason `text` looks like broken generation, or None when it reads as text (or is too short to tell)."""
    text = text[:MAX_CHARS]
    run = _CHAR_RUN.search(text)
    if run:
        return Garble(f"one character {run.group(1)!r} repeated {len(run.group(0))}+ times")
    tokens = _TOKEN.findall(text)
    n = len(tokens)
    scripts = _scripts(text)
    letters = sum(scripts.values())
    undecodable = text.count("\ufffd") > len(text) * NOT_TEXT  # binary noise decoded with errors is no generation
    if letters >= MIN_TOKENS and len(scripts) >= 3 and not undecodable and (word := _glued(tokens)) is not None:
        # judged on letters, not tokens: Chinese and Thai run many letters into one token
        return Garble(f"letters from {len(scripts)} scripts ({', '.join(sorted(scripts))}), glued inside words such as {word!r}")
    if 0 < n < MIN_TOKENS and len(set(tokens)) == 1 and (n >= WHOLE_RUN or (n >= 3 and tokens[0] in NEVER_TEXT)):
        return Garble(f"the whole text is token {tokens[0]!r} repeated {n} times")
    if n < MIN_TOKENS:
        return None
    length, token = _longest_run(tokens)
    if length >= RUN_LIMIT:
        return Garble(f"token {token!r} repeated {length} times in a row")
    top, count = Counter(tokens).most_common(1)[0]
    if count / n >= TOP_SHARE:
        return Garble(f"token {top!r} is {count / n:.0%} of {n} tokens")
    grams = list(zip(tokens, tokens[1:], tokens[2:], strict=False))
    repeats = len(grams) - len(set(grams))
    if grams and repeats / len(grams) >= REPEAT_SHARE:
        return Garble(f"{repeats / len(grams):.0%} of its {len(grams)} 3-grams repeat an earlier one")
    mixed = sorted(s for s, c in scripts.items() if c >= SCRIPT_SHARE * letters)
    if letters >= MIN_TOKENS and len(mixed) >= 3:
        return Garble(f"letters from {len(mixed)} scripts mixed ({', '.join(mixed)})")
    return None
