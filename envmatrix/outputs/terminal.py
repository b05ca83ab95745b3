"""The terminal: a rich Console that escapes control and format characters in every string it renders.

Names from users' files (a config's model_type, a GRPO config's keys), log lines quoted as evidence and
records merged from elsewhere all reach the terminal through a Console; rich parses markup but passes an
escape sequence through, so a `\\x1b]0;title\\x07` in a model_type would retitle the window and a `\\u202e`
reverse the line. `render_str` is where rich turns every string (printed, in a table cell, in padding)
into text, so escaping there, with the one `printable`, covers them all; our own markup has no control
characters, and rich's own colours are added after it.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console as RichConsole
from rich.text import Text

from ..errors import printable


class Console(RichConsole):
    """rich's Console, but nothing it renders from a string can drive the terminal."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(printable(text, keep_newlines=True), **kwargs)
