"""A log line as the program printed it: the prefixes that launchers, loggers and process managers put in front of it
removed, and the stream it belongs to (a rank, a worker process, a container) named, so a traceback interleaved by
ranks can be rebuilt per stream and an exception line behind a timestamp is still an exception line.

Prefixes are stripped from the left, one recognised form at a time, until none matches: ANSI colours, box drawing,
bracketed tags (`[rank0]:`, `[default1]:`, `[E ProcessGroupNCCL.cpp:607]`, `[2025-03-19 20:57:00,771 E 12 12]`,
`[engine.py:187]`), Ray's and vLLM's process tags (`(WorkerDict pid=2716276)`, `(VllmWorker rank=0 pid=12)`),
timestamps in their common forms, glog and syslog headers, logger levels (`ERROR`, `ERROR:root:`, `- ERROR -`),
source tags (`logging.cc:484:`), launcher labels (`15:`, `B-node/0`, a compose service's `name  |`).

Pure and bounded: it only ever sees the lines the scanner hands it (tracebacks and exception candidates), each cut to
MAX_CHARS; every pattern here is a plain left-anchored match without nested repetition.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_CHARS = 4096
MAX_STRIPS = 12

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
#: Forms that identify who printed a line (a rank, a process): kept as the line's stream.
_IDENTITY = re.compile(r"rank\s*\d+|default\d+|local_rank\s*\d+|pid=\d+|rank=\d+|\bRank \d+|^\d{1,5}$")
_PREFIXES: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"[│┃║╎]",  # rich's traceback box (its right edge is removed with the trailing spaces)
        r"\|(?=\s)",  # a Markdown table's cell border (a log pasted into a table renders `|   | line |`)
        r"(?:stdout|stderr)\s+[FP](?=\s)",  # the container runtime's log format (CRI: `<time> stderr F <line>`)
        # [rank0]: [E ProcessGroupNCCL.cpp:607] [2025-03-19 20:57:00,771 E 1 1] [engine.py:187]; not a notebook's linked frame (a cell's too)
        # nor an exception a user put in brackets (`[AttributeError: 'Builder' object has no attribute 'x'](https://…)`)
        r"\[(?![^\]\n]{0,120}(?:\.py|<ipython-input-[\w-]{1,80}>)\]\()(?!(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception):)[^\]\n]{0,120}\]:?",
        r"【[^】\n]{0,60}】",
        r"\((?:[\w.:-]+)(?:,?\s+[\w.-]+=[^\s,)]{1,60}){1,4}\)",  # (WorkerDict pid=2716276) (VllmWorker rank=0 pid=12)
        r"\((?:pid|rank)=\d+\)",
        r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+\s+[\w./-]{1,200}:\d+\]",  # glog
        r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?(?:\s+[-|:](?=\s))?",
        r"\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?=\s)",  # vLLM's `11-10 23:43:19`
        r"\d\d:\d\d:\d\d(?:[.,]\d+)?(?:\s+[-|](?=\s))?(?=\s)",
        r"[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d\s+[\w.-]+\s+[\w.@-]+\[\d+\]:",  # syslog: `Oct 04 13:19:39 host unit[394]:`
        # levels, also behind the component that logged (`stdout/INFO`, `health/ERROR`)
        r"(?:[a-z][\w-]{0,30}/)?(?:DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|CRITICAL|FATAL)(?::[\w.]+:|\s*[:|]|\s+-(?=\s)|(?=\s))",
        r"[-|]\s+(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+[-|](?=\s)",
        r"[\w.:-]{1,80}\s+[-|]\s+(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+[-|](?=\s)",  # logging's `name - LEVEL - `
        r"[\w-]{1,80}\.(?:py|cc|cpp|cu|c|h|rs|go):\d+\]?:?(?=\s)",  # logging.cc:484:
        r"[\w.:-]{1,80}:\d+\s+-(?=\s)",  # loguru's `module:function:12 - `
        r"\d{1,5}:(?=\s)",  # torchrun --tee / srun --label
        r"[\w.-]{1,80}/\d{1,5}(?=\s+\[)",  # `B-nemo-ft3/0 [default1]:`
        r"[\w.-]{1,80}\s{1,8}\|(?=\s)",  # docker compose: `gemma-vllm-server  | `
        r">+(?=\s)",  # a quoted reply
        r"\*\*(?=[A-Za-z_])",  # markdown bold around a line a user pasted (`**TypeError: …**`); its closing `**` goes too
        r"`(?=[ \t\[A-Za-z_])",  # Markdown code opened at the line start (`` `ImportError: …` ``, `` ` [rank0]: File … ``)
        r"(?:FAILED|ERROR)\s+\S+::\S+\s+-(?=\s)",  # pytest's short summary: `FAILED tests/x.py::test_y - TypeError: …`
        r"#{1,6}(?=[ \t]+(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception):)",  # an exception as a markdown heading (an issue's title)
        r"[\w.-]{1,80}:\d+:\d+\s+\[\d+\]",  # NCCL's own logger: `host:pid:tid [cudaDev] NCCL INFO …`
    )
)
#: A prefix that a logger wrote (a time, a level, glog's or NCCL's header): a line that has one is a log record of its own.
_LOGGED = re.compile(r"\d\d:\d\d:\d\d|\b(?:DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|CRITICAL|FATAL)\b|^[IWEF]\d{4}\b|^[\w.-]+:\d+:\d+\s")
#: The prefixes as one pattern: one match a strip, not one per form.
_PREFIX = re.compile("|".join(f"(?:{p.pattern})" for p in _PREFIXES))


#: An exception type set in bold alone (its opening `**` is a prefix already stripped): `ImportError:**`.
_BOLD_TYPE = re.compile(r"([A-Za-z_][\w.]*:)\*\*\s*")


@dataclass(frozen=True)
class Logical:
    """A line without its prefixes (and without the indentation it had after them), how far it was indented there,
    the stream (rank or process) it belongs to ('' when it names none), and whether a logger wrote it."""

    text: str
    stream: str = ""
    indent: int = 0
    logged: bool = False  # a logger's prefix (time, level) was removed: the line is a log record, not a message's next line


def clean(raw: str) -> Logical:
    """Strip the prefixes of one printed line (see the module docstring)."""
    text = _ANSI.sub("", raw[:MAX_CHARS]).rstrip().rstrip("│┃║").rstrip()
    stream: list[str] = []
    logged = False
    for _ in range(MAX_STRIPS):
        stripped = text.lstrip()
        m = _PREFIX.match(stripped)
        if m is None or m.end() == 0:
            break
        stream += _IDENTITY.findall(m.group(0).strip(" :[]()|"))
        logged = logged or _LOGGED.search(m.group(0)) is not None
        text = stripped[m.end() :]
    body = text.lstrip()
    if body.endswith("**") and raw.lstrip().startswith("**"):
        body = body[:-2].rstrip()
    elif raw.lstrip().startswith("**") and (bold := _BOLD_TYPE.match(body)):  # `**ImportError:** cannot import …`
        body = f"{bold.group(1)} {body[bold.end() :]}"
    elif body.endswith("`") and raw.lstrip().startswith("`"):  # inline code around the line: its closing backtick goes too
        body = body.rstrip("`").rstrip()
    return Logical(body, "/".join(stream), len(text) - len(body), logged)


#: A flattened line break: `\\n` before an indent, a traceback's header, a frame, or an exception line.
_BREAK = re.compile(r"\\n(?:\s|Traceback|File |During |The above |[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b)")


def unflatten(raw: str) -> list[str]:
    """A traceback printed on one line with literal `\\n` between its lines (a JSON or repr'd field, Ray's error
    strings) as the lines it holds; any other line as itself. A frame's Windows path (`C:\\Users\\nirivas\\…\\numpy`) holds
    `\\n` too, followed by a name: a flattened line break is followed by the next line's indent or its first word."""
    if "\\n" not in raw or ("Traceback (most recent call last)" not in raw and 'File \\"' not in raw and 'File "' not in raw):
        return [raw]
    if _BREAK.search(raw) is None:
        return [raw]
    return [part.replace('\\"', '"') for part in raw.split("\\n")]
