"""One rule per sink for text that came from elsewhere (a file's name, an interpreter's output, an HTTP reason
phrase, a record merged from a site): whatever its source, it passes the rule of the sink it reaches.

- terminal: control and format characters escaped (`probes/untrusted.printable`, the one owner shared with
  the probe); rich's Console (outputs/terminal.py) applies it to everything it renders.
- Markdown (a watch summary, which becomes a job summary or a GitHub issue body): `md_text` escapes what
  Markdown or GitHub would act on (links and images, inline HTML, @mentions, #references, emphasis, table
  pipes, line breaks); `md_code` quotes text as inline code instead (backticks cannot close it early).
- CSV (results.csv, read by spreadsheets): a text cell a spreadsheet would take for a formula (it begins with
  =, +, -, @, a tab or a carriage return) is prefixed with a single quote, as OWASP's CSV injection page says;
  numbers stay numbers.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from probes.untrusted import printable

if TYPE_CHECKING:
    import pandas as pd

#: Characters Markdown (CommonMark and GitHub's extensions) gives a meaning to, escaped with a backslash.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|@#!~&$:])")
#: What only matters where a line begins (a list, a heading, a quote, a numbered list), and GitHub's `www.` autolink.
_MD_LEADING = re.compile(r"^(\d{0,9})([-+.)])(?=\s|$)|^()(>)")
_MD_WWW = re.compile(r"(?i)\b(www)\.")
#: What a spreadsheet starts a formula with (OWASP, CSV Injection).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def terminal(text: str, *, keep_newlines: bool = False) -> str:
    """Text for a terminal: escape sequences and other control or format characters shown, never acted on."""
    return printable(text, keep_newlines=keep_newlines)


def md_text(text: str) -> str:
    """Text for Markdown (inline, a table cell included): one line, control characters escaped, and every
    character Markdown or GitHub acts on backslash-escaped, so `[x](http://…)`, `<img src=…>`, `@everyone`,
    `#12` and `|` read as the characters they are."""
    flat = " ".join(printable(text).split())
    escaped = _MD_SPECIAL.sub(r"\\\1", flat)
    return _MD_WWW.sub(r"\1\\.", _MD_LEADING.sub(lambda m: f"{m[1] or m[3] or ''}\\{m[2] or m[4]}", escaped))


def md_code(text: str) -> str:
    """Text quoted as Markdown inline code (one line, control characters escaped): a fence longer than any run
    of backticks inside, so nothing in it is rendered; a `|` is escaped, which GitHub's tables need even in code."""
    flat = " ".join(printable(text).split()).replace("|", "\\|")
    longest = max((len(m) for m in re.findall(r"`+", flat)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {flat} {fence}"  # CommonMark strips one space each side: a backtick at an end stays inside


def csv_cell(value: Any) -> Any:
    """A cell for CSV: a string a spreadsheet would evaluate is prefixed with `'` (OWASP); anything else as is."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_text(frame: pd.DataFrame) -> str:
    """A table as CSV with every text cell through `csv_cell` (numeric columns are left numbers)."""
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    safe = frame.copy()
    for column in safe.columns:
        if not (is_numeric_dtype(safe[column]) or is_bool_dtype(safe[column])):
            safe[column] = safe[column].map(csv_cell, na_action="ignore")
    safe.columns = [csv_cell(str(c)) for c in safe.columns]
    text: str = safe.to_csv(index=False)
    return text
