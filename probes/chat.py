"""A user's chat template rendered in a sandbox with a time limit, a memory limit and an output limit.

transformers already renders chat templates in Jinja's immutable sandbox, which refuses attribute escapes and
has no loader for `{% include %}`; it does not stop a template that loops for hours or builds a string of
gigabytes, and a refusal surfaces as a raw exception. Here the template renders the probe's prompts once, with
the tokenizer's own `apply_chat_template`, in a forked child: an address-space limit (RLIMIT_AS) turns a
runaway string into a MemoryError, an alarm and the parent's deadline stop a loop, and the output is capped.
The parent then uses the child's rendering, so the template never runs unbounded in the probe itself (TRL's
trainer renders the same deterministic prompts again, once this rendering has shown that it ends). Every way
it can fail is bad input naming the template and why (exit 2), never a crash.

Hand-written because no library bounds an arbitrary Jinja render's time and memory: the limits are the
operating system's (fork, setrlimit, alarm, kill); Linux and macOS have them.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import time
import warnings
from typing import Any

from probes import untrusted
from probes.record import ProbeInputError

#: A child's report can hold the whole output (JSON escapes a character as at most 12 bytes) and a message.
_REPORT_BYTES = 12 * untrusted.TEMPLATE_OUTPUT_CHARS + 4096


class TemplateRefused(ProbeInputError):
    """The chat template cannot render the probe's prompts within the sandbox's limits."""


def _vm_bytes() -> int:
    """This process's address space now (VmSize), 0 where /proc is not there."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def _render_all(tokenizer: Any, prompts: list[str]) -> list[str]:
    return [str(tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)) for p in prompts]


def _child(tokenizer: Any, prompts: list[str], write_fd: int) -> None:
    """In the forked child: limits, render, one JSON report on the pipe, exit without cleanup."""
    report: dict[str, Any]
    try:
        vm = _vm_bytes()
        if vm:
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            soft = vm + untrusted.TEMPLATE_MEMORY
            resource.setrlimit(resource.RLIMIT_AS, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the alarm kills: a loop cannot catch it
        signal.alarm(int(untrusted.TEMPLATE_SECONDS) + 1)
        rendered = _render_all(tokenizer, prompts)
        total = sum(len(r) for r in rendered)
        report = {"rendered": rendered} if total <= untrusted.TEMPLATE_OUTPUT_CHARS else {"chars": total}
    except MemoryError:
        report = {"memory": True}
    except RecursionError:
        report = {"error": "it calls itself without end (RecursionError)", "type": "RecursionError"}
    except BaseException as exc:  # the template's own error, whatever its type: reported, never raised here
        report = {"error": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:500], "type": type(exc).__name__}
    try:
        data = json.dumps(report).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view) :]
    finally:
        os._exit(0)


def _read_report(read_fd: int, pid: int) -> tuple[bytes, bool]:
    """The child's report, and whether it ran past the deadline (then it is killed)."""
    deadline = time.monotonic() + untrusted.TEMPLATE_SECONDS
    chunks: list[bytes] = []
    size = 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            return b"", True
        ready, _, _ = select.select([read_fd], [], [], left)
        if not ready:
            continue
        block = os.read(read_fd, 1 << 16)
        if not block:
            return b"".join(chunks), False
        size += len(block)
        if size > _REPORT_BYTES:
            os.kill(pid, signal.SIGKILL)
            return b"", False
        chunks.append(block)


def _why(report: dict[str, Any]) -> str:
    """A child's failed report, in words a user can act on."""
    if report.get("memory"):
        return f"it needs more than {untrusted.size_text(untrusted.TEMPLATE_MEMORY)} to render one short user turn (a string built without bound?)"
    if "chars" in report:
        return (
            f"it renders {report['chars']:,} characters for the probe's few one-line user turns, more than {untrusted.TEMPLATE_OUTPUT_CHARS:,} "
            "(a string built without bound?)"
        )
    error, kind = str(report.get("error", "")), report.get("type")
    if kind == "TypeError" and "no loader" in error:
        return "it includes or imports another template ({% include %}, {% import %}), which a chat template cannot: there is no file to read"
    if kind == "RecursionError":
        return error
    if kind == "SecurityError":
        return f"the sandbox stopped it: {error}"
    if kind == "TemplateSyntaxError":
        return f"it is not a valid Jinja template: {error}"
    return f"it fails on a single user turn: {error}"


#: What one constant expression of a template may come to before anything renders (characters, items, or the value
#: of an integer): Jinja folds constants when it compiles, so `{{ 'x' * 10**9 }}` costs its gigabyte then.
MAX_LITERAL = 16 * untrusted.TEMPLATE_OUTPUT_CHARS


def _size(node: Any) -> int | None:
    """What a constant expression comes to (a string's or list's length, an integer's value), None when not constant;
    above MAX_LITERAL it is capped just above, so nothing big is ever computed here."""
    from jinja2 import nodes

    cap = MAX_LITERAL + 1
    if isinstance(node, nodes.Const):
        value = node.value
        if isinstance(value, bool) or value is None:
            return 0
        if isinstance(value, int):
            return min(abs(value), cap)
        return min(len(value), cap) if isinstance(value, (str, bytes, list, tuple)) else 0
    if isinstance(node, (nodes.List, nodes.Tuple)):
        return min(sum(_size(item) or 0 for item in node.items) + len(node.items), cap)
    if isinstance(node, (nodes.Mul, nodes.Pow, nodes.Add, nodes.Concat)):
        operands = node.nodes if isinstance(node, nodes.Concat) else [node.left, node.right]
        sizes = [_size(o) for o in operands]
        if any(size is None for size in sizes):
            return None
        known = [int(size) for size in sizes if size is not None]
        if isinstance(node, nodes.Mul):
            return min(known[0] * known[1], cap)
        if isinstance(node, nodes.Pow):
            base, exponent = known
            return cap if base > 1 and exponent * max(base.bit_length() - 1, 1) > MAX_LITERAL.bit_length() else min(base**exponent, cap)
        return min(sum(known), cap)
    return None


def literal_problem(source: str) -> str | None:
    """Why a template's text is refused before it renders: a constant expression beyond MAX_LITERAL (Jinja's parser
    only: nothing is compiled or run here); None for a template this check passes (the sandbox bounds the rest)."""
    try:
        from jinja2 import Environment, TemplateSyntaxError, nodes
    except ImportError:  # pragma: no cover - transformers needs jinja2 to render at all
        return None
    try:
        tree = Environment().parse(source)
    except TemplateSyntaxError:
        return None  # the sandbox renders it and reports the syntax error in its words
    except RecursionError:
        return "it nests too deeply to parse"
    for node in tree.find_all((nodes.Mul, nodes.Pow, nodes.Add, nodes.Concat)):
        size = _size(node)
        if size is not None and size > MAX_LITERAL:
            return (
                f"line {node.lineno}: a constant expression comes to more than {untrusted.size_text(MAX_LITERAL)} "
                "(a literal repeated or raised without bound); a chat template renders a few short turns"
            )
    return None


def _sources(tokenizer: Any) -> list[str]:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str):
        return [template]
    if isinstance(template, dict):
        return [t for t in template.values() if isinstance(t, str)]
    return []


def render(tokenizer: Any, prompts: list[str], origin: str) -> list[str]:
    """`prompts` as single user turns through the tokenizer's chat template (with the generation prompt),
    rendered in the sandbox; TemplateRefused naming `origin` and why when it does not end, grows without bound,
    escapes, includes a file or fails. Its constant expressions are bounded first (`literal_problem`)."""
    for source in _sources(tokenizer):
        problem = literal_problem(source)
        if problem:
            raise TemplateRefused(f"{origin}: the chat template cannot be used: {problem}")
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():  # Python 3.12+ warns on fork in a threaded process: the child only renders
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(tokenizer, prompts, write_fd)
    os.close(write_fd)
    try:
        raw, late = _read_report(read_fd, pid)
    finally:
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
    if late:
        seconds = untrusted.TEMPLATE_SECONDS
        raise TemplateRefused(f"{origin}: the chat template still renders after {seconds:g} s (a loop without end?); a chat template renders in milliseconds")
    if not raw:
        how = f"signal {-os.waitstatus_to_exitcode(status)}" if os.WIFSIGNALED(status) else f"exit status {os.waitstatus_to_exitcode(status)}"
        raise TemplateRefused(f"{origin}: the chat template stopped its renderer ({how}) or wrote more than {untrusted.size_text(_REPORT_BYTES)}")
    report = json.loads(raw)
    if "rendered" in report:
        return [str(r) for r in report["rendered"]]
    raise TemplateRefused(f"{origin}: the chat template cannot be used: {_why(report)}")
