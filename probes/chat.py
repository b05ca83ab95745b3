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


def render(tokenizer: Any, prompts: list[str], origin: str) -> list[str]:
    """`prompts` as single user turns through the tokenizer's chat template (with the generation prompt),
    rendered in the sandbox; TemplateRefused naming `origin` and why when it does not end, grows without bound,
    escapes, includes a file or fails."""
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
