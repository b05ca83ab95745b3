"""What a file or a value a user hands over may be: its size, nesting depth and digits per kind of file, how
long and how large a chat template may render, how many tokens a tokenizer may hold, the words a bad number
is refused with, and text made fit for a terminal. The one owner of these bounds.

Standard library only, and in probes/ rather than envmatrix/: the probe runs inside the environment under
test and never imports envmatrix, yet it reads the same config.json, tokenizer files and chat templates that
`envmatrix preflight` checks on the host; both import the numbers and the readers from here, so the two sides
cannot drift. envmatrix reads its own inputs (matrix files, GRPO configs, records, logs) through here too.

Every refusal is one line naming the file (or field) and the bound it broke: `Refused`, a ValueError the
callers turn into their exit-2 error (envmatrix's InputError, the probe's ProbeInputError).
"""

from __future__ import annotations

import json
import os
import re
import stat
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class Kind:
    """A kind of file a user hands over and its bounds: bytes, nesting depth, digits of one integer, and (YAML)
    values once aliases are expanded. `what` names it in messages ("a model's config.json"); `hint` says what to do."""

    what: str
    max_bytes: int
    max_depth: int = 32
    max_digits: int = 40  # transformers writes an unset model_max_length as int(1e30): 31 digits
    max_values: int = 100_000
    hint: str = ""


#: A matrix file is a few KiB (PyYAML reads some 100-200 KiB/s); it nests five levels; no field takes a
#: number above 2**31 - 1.
MATRIX = Kind("a matrix file", 256 * KIB, max_digits=30, hint="a matrix file is a few KiB; is this the right file?")
#: A TRL GRPOConfig or recipe (open-r1's): a few KiB of YAML or JSON, read by the matrix file's loader.
GRPO_CONFIG = Kind("a GRPO config", 256 * KIB, hint="a GRPOConfig is a few KiB of YAML or JSON; is this the right file?")
#: A model's config.json: released ones hold 1-20 KiB (long rope factor lists, quantization module lists and
#: id2label tables reach a few hundred KiB); the deepest (compressed-tensors quantization) nest six levels.
MODEL_CONFIG = Kind("a model's config.json", 4 * MIB, hint="a config.json of a released model is under 1 MiB; download it again")
#: Vocabulary files (tokenizer.json, vocab.json, merges.txt, tokenizer.model): Gemma 3's tokenizer.json, the
#: largest released, is 33 MiB. Its normalizer and pre-tokenizer sequences nest under ten levels (tokenizers'
#: own reader stops at 128).
TOKENIZER = Kind("a tokenizer vocabulary file", 64 * MIB, max_depth=64, hint="download the tokenizer files again")
#: tokenizer_config.json, special_tokens_map.json, added_tokens.json, chat_template.json, generation and
#: processor configs: Gemma 3's tokenizer_config.json, with six thousand added tokens, is 1.2 MiB.
TOKENIZER_SETTINGS = Kind("a tokenizer or processor settings file", 8 * MIB, hint="download the tokenizer files again")
#: chat_template.jinja: released templates (tool calling included) are under 20 KiB.
CHAT_TEMPLATE = Kind("a chat template", 256 * KIB, hint="a released chat template is a few KiB")
#: A requirements file (for `init`): a training stack's is tens of KiB; `-r` includes nest a few levels (depth),
#: and one environment pins at most some thousands of packages (values).
REQUIREMENTS = Kind("a requirements file", 1 * MIB, max_depth=8, max_values=10_000, hint="is this the right file?")
#: pylock.toml, uv.lock (`init`, and the locks `publish` signs): a large monorepo's uv.lock is a few MiB.
LOCK = Kind("a lock file", 16 * MIB, max_values=10_000, hint="is this the right file?")
#: A training log classified whole: the classifier reads about 50 MiB/s (bench/bench_classify.py), so this is
#: some 20 s; a longer log's failure is at its end (tail -c 512M LOG | envmatrix classify -).
LOG = Kind("a training log", 1 * GIB, hint="classify the end of it: tail -c 512M LOG | envmatrix classify -")
#: One cell's record and the probe's result.json (a record carries a log tail and the result).
RECORD = Kind("a record", 16 * MIB, max_depth=64)
PROBE_RESULT = Kind("a probe result", 4 * MIB, max_depth=64)
#: A published table's index.json (`report --results URL`): about 300 bytes an entry, 20,000 records at most.
PUBLISHED_INDEX = Kind("a site index", 8 * MIB, max_values=20_000)
#: A package's page on an index's simple API (`watch`, `bisect`): PyPI's JSON page for torch, the largest a training
#: stack asks for, is about 3 MB.
INDEX_PAGE = Kind("an index page", 64 * MIB)
#: One signed attestation (a DSSE envelope of one cell's statement: a few KiB).
ATTESTATION = Kind("an attestation", 1 * MIB)
#: A PEM key (`publish --sign-key`, `report --trust`): an ed25519 public key is about 113 bytes.
PEM_KEY = Kind("a PEM key", 16 * KIB, hint="pass the key file")

#: Tokens a tokenizer may hold: the largest released vocabularies hold about 262,000 (Gemma 3); a 2-million-token
#: tokenizer alone costs transformers 5 s and 600 MiB to load, and a model 256 M parameters to embed it.
MAX_TOKENS = 1 << 19
#: Embedding rows a shrunk model may have: it covers the ids the probe uses (its prompts through the chat
#: template, the parity texts, the special tokens), whatever the tokenizer's length.
MAX_EMBEDDING_ROWS = 300_000
#: Parameters a shrunk model may keep (its embedding at MAX_EMBEDDING_ROWS, untied, is 38 M): a size the shrink
#: keeps, such as learned positions for 16 M tokens, would otherwise make the "tiny" model gigabytes.
MAX_SHRUNK_PARAMETERS = 50_000_000
#: A chat template renders the probe's few one-line user turns in milliseconds; it gets this long, this much
#: more address space, and this many characters of output, in a child process of its own.
TEMPLATE_SECONDS = 5.0
TEMPLATE_MEMORY = 256 * MIB
TEMPLATE_OUTPUT_CHARS = 64 * KIB
#: A full-size model is built on PyTorch's meta device: per-expert modules cost Python time (DeepSeek-V3,
#: 61 layers x 256 experts, takes seconds), so layers x experts is bounded above the largest released
#: (Kimi K2: 61 x 384; Qwen3-Next: 48 x 512).
MAX_LAYER_EXPERTS = 1 << 15  # Kimi K2: 61 x 384 = 23,424; 65,536 took 32 s and 1.2 GiB to build on meta


class Refused(ValueError):
    """A file or value beyond a bound, or not what it should be: one line naming it, the bound, what to do."""


def size_text(n: int) -> str:
    """`4194304` → `4 MiB` (bounds are whole KiB, MiB or GiB)."""
    for unit, name in ((GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")):
        if n >= unit:
            return f"{n / unit:g} {name}"
    return f"{n} bytes"


def _refuse(path: Path | str, problem: str, kind: Kind) -> Refused:
    return Refused(f"{path}: {problem}" + (f"; {kind.hint}" if kind.hint else ""))


_FILE_TYPES = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket"))


def _file_type(mode: int) -> str:
    return next((name for test, name in _FILE_TYPES if test(mode)), "not a plain file")


#: Kernel pseudo-file systems: their files say size 0 (or 4096) whatever they hold, and hold secrets
#: (/proc/self/environ) or never end (/dev/zero); no file a user hands over lives there.
PSEUDO_ROOTS = ("/proc", "/sys", "/dev")


def pseudo_file(path: Path | str) -> str | None:
    """The pseudo-file system `path` is in (a link followed), or None."""
    real = os.path.realpath(path)
    return next((root for root in PSEUDO_ROOTS if real == root or real.startswith(root + "/")), None)


def regular_size(path: Path, kind: Kind) -> int:
    """The size of `path`, a regular file within the kind's bound, outside /proc, /sys and /dev; otherwise Refused
    naming it and why (never quoting it)."""
    try:
        info = path.stat()
    except OSError as exc:
        raise Refused(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise Refused(f"{path}: not a regular file ({_file_type(info.st_mode)}); give {kind.what}")
    root = pseudo_file(path)
    if root is not None:
        raise Refused(f"{path}: a file of {root}, not {kind.what}; nothing is read from {', '.join(PSEUDO_ROOTS)}: give a file of yours")
    if info.st_size > kind.max_bytes:
        raise _refuse(path, f"{info.st_size:,} bytes, more than {kind.what} may hold ({size_text(kind.max_bytes)})", kind)
    return info.st_size


def read_bytes(path: Path, kind: Kind) -> bytes:
    """The bytes of `path`, read once: a regular file within the kind's byte bound (a file that grows while it
    is read is cut at the bound and refused)."""
    regular_size(path, kind)
    try:
        with path.open("rb") as fh:
            raw = fh.read(kind.max_bytes + 1)
    except OSError as exc:
        raise Refused(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(raw) > kind.max_bytes:
        raise _refuse(path, f"more than {kind.what} may hold ({size_text(kind.max_bytes)})", kind)
    return raw


def read_text(path: Path, kind: Kind) -> str:
    """`read_bytes` decoded as UTF-8 (a BOM is dropped)."""
    raw = read_bytes(path, kind)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Refused(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None


def _json_int(kind: Kind, where: Path | str) -> Any:
    def parse(digits: str) -> int:
        if len(digits.lstrip("-")) > kind.max_digits:
            raise _refuse(where, f"a number of {len(digits.lstrip('-')):,} digits; {kind.what} holds none longer than {kind.max_digits}", kind)
        return int(digits)

    return parse


def depth(value: Any) -> int:
    """How deeply lists and objects nest in `value` (a scalar is 0), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def _no_constant(where: Path | str, kind: Kind) -> Any:
    def refuse(name: str) -> Any:
        raise _refuse(where, f"{name} is not a JSON number; {kind.what} holds none", kind)

    return refuse


def parse_json(raw: bytes | str, where: Path | str, kind: Kind, *, finite: bool = False) -> Any:
    """JSON within the kind's depth and digits; Refused naming `where` otherwise (not JSON, too deep, a number
    too long). NaN and Infinity are read as Python reads them (the fields that take numbers refuse them), or,
    with `finite`, refused (a file envmatrix itself writes never holds them: a site's index, an attestation)."""
    constant = {"parse_constant": _no_constant(where, kind)} if finite else {}
    try:
        value = json.loads(raw, parse_int=_json_int(kind, where), **constant)
    except RecursionError:
        raise _refuse(where, f"nested more than {kind.max_depth} levels deep, deeper than {kind.what} ever is", kind) from None
    except UnicodeDecodeError as exc:
        raise Refused(f"{where}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise _refuse(where, f"not valid JSON ({exc.msg}: line {exc.lineno} column {exc.colno})", kind) from None
    if depth(value) > kind.max_depth:
        raise _refuse(where, f"nested more than {kind.max_depth} levels deep, deeper than {kind.what} ever is", kind)
    return value


def read_json(path: Path, kind: Kind) -> Any:
    """A JSON file read once within all of the kind's bounds."""
    return parse_json(read_bytes(path, kind), path, kind)


#: The longest key (one part of a dotted key or header) a TOML file envmatrix reads may have: package names are at
#: most some tens of characters; tomllib's time grows with a long dotted header.
MAX_TOML_KEY_CHARS = 1024
_TOML_PLAIN = re.compile(r"[^\"'#\n\[\]{},0-9]+")  # value text that opens, closes and counts nothing
_TOML_BARE = re.compile(r"[A-Za-z0-9_-]+")  # a bare key part
_TOML_DIGITS = re.compile(r"[0-9][0-9_]*")
_TOML_HEADER_PART = re.compile(r"[^.\]\"'\n]+")


def toml_problem(text: str, where: Path | str, kind: Kind) -> None:
    """Refused when TOML `text` is beyond the kind's bounds, found in one linear pass before tomllib parses it:
    nesting (table header parts + dotted key parts + open brackets) deeper than `max_depth`, a key part longer than
    MAX_TOML_KEY_CHARS, or an integer of more than `max_digits` digits. Strings are skipped as TOML writes them
    (basic, literal, multi-line), comments to the end of their line. It errs on the side of the bounds: a file it
    passes may still be refused by tomllib (a syntax error, which tomllib names), never the other way round."""
    n = len(text)
    i = line = 0
    line = 1
    table = 0  # parts of the current [table] header
    opened: list[str] = []  # the open [ and { of the value being read
    parts = 0  # dotted parts of the key being read
    key_start = -1  # where the current bare key part began (-1: none yet)
    in_key = True  # a key (or at a line's start, a header) comes next
    header = False
    digits = 0

    def refuse(problem: str) -> Refused:
        return _refuse(where, f"line {line}: {problem}", kind)

    def deep(level: int) -> None:
        if level > kind.max_depth:
            raise refuse(f"nested more than {kind.max_depth} levels deep (table headers, dotted keys and brackets counted)")

    def long_key(length: int) -> None:
        if length > MAX_TOML_KEY_CHARS:
            raise refuse(f"a key of {length:,} characters or more; {kind.what} has none longer than {MAX_TOML_KEY_CHARS}")

    while i < n:
        if not in_key and not header:  # a value: skip what cannot open, close or count anything in one step
            plain = _TOML_PLAIN.match(text, i)
            if plain:
                i = plain.end()
                digits = 0
                if i >= n:
                    break
        elif in_key and not header:
            bare = _TOML_BARE.match(text, i)
            if bare:
                long_key(bare.end() - i)
                parts = max(parts, 1)
                key_start, i = -2, bare.end()  # -2: a bare key part was read
                if i >= n:
                    break
        else:
            part = _TOML_HEADER_PART.match(text, i)
            if part:
                long_key(part.end() - key_start)
                i = part.end()
                if i >= n:
                    break
        ch = text[i]
        if ch in "\"'":
            quote = ch * 3 if text.startswith(ch * 3, i) else ch
            j = i + len(quote)
            while True:
                k = text.find(quote, j)
                if k < 0:
                    return  # unterminated: tomllib says where
                escaped = 0
                while ch == '"' and text[k - 1 - escaped] == "\\" and k - 1 - escaped >= j:
                    escaped += 1
                if escaped % 2 == 0:
                    break
                j = k + 1
            if in_key or header:
                long_key(k - j)
                parts = max(parts, 1)
            line += text.count("\n", i, k)
            i = k + len(quote)
            while len(quote) == 3 and i < n and text[i] == ch:  # up to two more quotes end the string
                i += 1
            digits = 0
            continue
        if ch == "#":
            k = text.find("\n", i)
            i = n if k < 0 else k
            continue
        if ch == "\n":
            line += 1
            digits = 0
            if not opened:
                in_key, header, parts, key_start = True, False, 0, -1
            i += 1
            continue
        if header:
            if ch == ".":
                table += 1
                deep(table)
                key_start = i + 1
            elif ch == "]":
                header, in_key = False, False
            elif not ch.isspace():
                long_key(i - key_start)
            i += 1
            continue
        if in_key:
            if ch == "[" and not opened and parts == 0:
                header, table = True, 1
                i += 2 if text.startswith("[[", i) else 1
                key_start = i
                continue
            if ch == "=":
                in_key, parts, key_start = False, 0, -1
            elif ch == "}" and opened:
                opened.pop()
                in_key = False
            elif ch == ".":
                parts += 1
                deep((0 if opened else table) + len(opened) + parts)
                key_start = -1
            elif not ch.isspace():
                if key_start < 0:
                    key_start = i
                    parts = max(parts, 1)
                long_key(i - key_start)
            i += 1
            continue
        if ch in "[{":
            opened.append(ch)
            deep(table + len(opened))
            in_key = ch == "{"  # an inline table's keys follow
            key_start = -1
        elif ch in "]}":
            if opened:
                opened.pop()
        elif ch == "," and opened and opened[-1] == "{":
            in_key, parts, key_start = True, 0, -1
        elif ch.isdigit():
            run = _TOML_DIGITS.match(text, i)
            assert run is not None
            digits += sum(c != "_" for c in run.group())
            if digits > kind.max_digits:
                raise refuse(f"a number of more than {kind.max_digits} digits; {kind.what} holds none so long")
            i = run.end()
            continue
        if ch != "_":
            digits = 0
        i += 1


def open_stream(path: str, kind: Kind) -> tuple[Bounded, str | None]:
    """A binary stream over `path` that stops at the kind's byte bound, and a note when it may be cut: a regular
    file beyond the bound is Refused; anything else (a FIFO, a device such as /dev/zero) is read up to the bound,
    and the note says so. A folder is Refused; a path that cannot be opened raises OSError (the caller words it)."""
    info = os.stat(path)
    if stat.S_ISDIR(info.st_mode):
        raise Refused(f"{path}: a folder, not {kind.what}; give a file")
    if stat.S_ISREG(info.st_mode):
        regular_size(Path(path), kind)
        note = None
    else:
        note = f"{path} is {_file_type(info.st_mode)}, not a regular file: read up to {size_text(kind.max_bytes)} of it"
    return Bounded(open(path, "rb"), kind.max_bytes), note  # the caller closes it


class Bounded:
    """A binary stream that ends after `limit` bytes (`cut` says whether there was more)."""

    def __init__(self, stream: Any, limit: int) -> None:
        self.stream = stream
        self.left = limit
        self.cut = False

    def read(self, size: int = -1) -> bytes:
        want = self.left if size < 0 else min(size, self.left)
        if want <= 0:
            self.cut = self.cut or bool(self.stream.read(1))
            return b""
        block: bytes = self.stream.read(want)
        self.left -= len(block)
        return block

    def close(self) -> None:
        self.stream.close()

    def __enter__(self) -> Bounded:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ---- values ------------------------------------------------------------------------------------------


def kind_of(value: Any) -> str:
    """How a value reads in a message: `a mapping`, `a list`, `a boolean`, `nothing`, else its type's name."""
    return {dict: "a mapping", list: "a list", bool: "a boolean", type(None): "nothing"}.get(type(value), type(value).__name__)


def shown(value: Any, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters (a 4 MiB string is named, not echoed)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 10]}… ({len(text):,} characters)"


def number_problem(value: Any, want: type, lo: float, hi: float, *, from_text: bool = False) -> tuple[Any, str | None]:
    """`value` as an integer (`want` int) or a number (float) within [lo, hi], or None and why not: the words a
    matrix file's fields and a config.json's sizes are refused with. `from_text`: a string holding a number is
    read as one (YAML here keeps dotted numbers as text)."""
    noun = "an integer" if want is int else "a number"
    if isinstance(value, (bool, dict, list)) or value is None:
        return None, f"must be {noun}, got {kind_of(value)}"
    number: Any
    if want is int:
        if not isinstance(value, int):
            return None, f"must be an integer, got {shown(value)}"
        number = value
    else:
        if isinstance(value, str) and not from_text:
            return None, f"must be a number, got {shown(value)}"
        if isinstance(value, str) and value.strip().lower().lstrip("+-") in (".nan", ".inf"):  # YAML's own spellings
            value = value.strip().lower().replace(".", "", 1)
        try:
            number = float(value)
        except (ValueError, OverflowError, TypeError):
            return None, f"must be a number, got {shown(value)}"
    if not lo <= number <= hi:
        bounds = f"[{int(lo)}, {int(hi)}]" if want is int else f"[{lo:g}, {hi:g}]"
        return None, f"{number} is out of range {bounds}"
    return number, None


# ---- text for a terminal -------------------------------------------------------------------------------


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with control and format characters escaped (`\\x1b`, `\\u202e`): a name from a user's file, a log
    line or a record reaches a terminal, and must not drive it (colours, cursor moves, a title, a cleared
    screen, a hidden or reversed word)."""
    if text.isprintable():  # the common case, in C
        return text
    out = []
    for ch in text:
        if (ch == "\n" and keep_newlines) or unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp"):
            out.append(ch)
        else:
            out.append(ascii(ch)[1:-1])
    return "".join(out)
