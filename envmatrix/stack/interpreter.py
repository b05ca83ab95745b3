"""An interpreter's installed distributions read into a stack (`init --current [PYTHON]`): the running one,
or another one such as a matrix venv's, asked with a standard-library snippet run in it (`-I`: no user site,
no PYTHONPATH), so the other interpreter needs nothing of envmatrix installed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from pathlib import Path

from probes import untrusted

from ..errors import BackendError, InputError, printable
from .base import INTERPRETER_TIMEOUT_S, MAX_INTERPRETER_OUTPUT_BYTES, Stack

#: Run inside the interpreter read: its Python, every distribution (importlib.metadata), and torch's CUDA
#: build where torch's version has no local tag (PyPI's CUDA builds), read from torch itself.
SNIPPET = """
import importlib.metadata as m, json, sys
dists = {}
for d in m.distributions():
    name = d.metadata["Name"]
    if name:
        dists.setdefault(name, d.version)
cuda = None
torch = next((v for k, v in dists.items() if k.lower() == "torch"), None)
if torch is not None and "+" not in torch:
    try:
        import torch as t
        cuda = t.version.cuda
    except Exception:
        pass
print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "executable": sys.executable, "dists": dists, "torch_cuda": cuda}))
"""


#: What the snippet prints: one JSON object, its dists a flat mapping (bounds: base.py's output cap, little nesting).
ANSWER = untrusted.Kind("an interpreter's list of distributions", MAX_INTERPRETER_OUTPUT_BYTES, max_depth=4)
STDERR_KEPT = 64 << 10


def _ask(exe: str) -> tuple[bytes, bytes, int | None]:
    """(stdout, the end of stderr, exit status) of the snippet run in `exe`, read through capped pipes: at most
    MAX_INTERPRETER_OUTPUT_BYTES of stdout (an interpreter that prints more is stopped and refused) and the last
    STDERR_KEPT bytes of stderr, within INTERPRETER_TIMEOUT_S."""
    try:
        proc = subprocess.Popen([exe, "-I", "-c", SNIPPET], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        raise BackendError(f"{exe}: could not ask it for its distributions: {exc.strerror or exc}") from None
    assert proc.stdout is not None and proc.stderr is not None
    tail = bytearray()

    def drain() -> None:
        for block in iter(lambda: proc.stderr.read(65536) if proc.stderr else b"", b""):
            tail.extend(block)
            del tail[:-STDERR_KEPT]

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    late = threading.Event()

    def stop() -> None:
        late.set()
        proc.kill()

    timer = threading.Timer(INTERPRETER_TIMEOUT_S, stop)
    timer.start()
    try:
        out = proc.stdout.read(MAX_INTERPRETER_OUTPUT_BYTES + 1)
        if len(out) > MAX_INTERPRETER_OUTPUT_BYTES:
            proc.kill()
            raise InputError(f"{exe}: printed more than {MAX_INTERPRETER_OUTPUT_BYTES >> 20} MiB when asked for its distributions; is it a Python interpreter?")
        code = proc.wait()
    finally:
        timer.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        reader.join(5)
    if late.is_set():
        raise BackendError(f"{exe}: did not answer within {INTERPRETER_TIMEOUT_S:g} s")
    return out, bytes(tail), code


def read_interpreter(python: str | None = None) -> Stack:
    """The distributions installed in `python` (default: this interpreter) as exact pins."""
    exe = python or sys.executable
    if python is not None and not Path(python).is_file():
        raise InputError(f"--current {python}: no such interpreter; give the path of a python executable (e.g. .envmatrix/venvs/<build>/bin/python)")
    out, err, code = _ask(exe)
    if code != 0 and not out.strip():
        said = printable(err.decode(errors="replace").strip()[-300:])
        raise BackendError(f"{exe}: did not answer with its distributions (exit {code}): {said or 'no output'}")
    try:
        data = untrusted.parse_json(out, f"{exe}'s answer", ANSWER)
        dists = data["dists"]
        py = str(data["python"])
        if not isinstance(dists, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in dists.items()):
            raise TypeError
        if not re.fullmatch(r"3\.\d{1,3}", py):
            raise TypeError
    except untrusted.Refused as exc:  # an answer beyond the reader's bounds is bad input, as a file would be
        raise InputError(f"{exe}: did not answer with a list of its distributions: {exc}") from None
    except (KeyError, TypeError):
        said = printable(err.decode(errors="replace").strip()[-300:])
        raise BackendError(f"{exe}: did not answer with its distributions (exit {code}): {said or 'no output'}") from None
    stack = Stack(source=f"the distributions installed in {data.get('executable', exe)}")
    stack.python = (py, f"{exe} is Python {py}")
    for name, version in sorted(dists.items()):
        stack.add(str(name), str(version), str(exe))
    if data.get("torch_cuda") and "torch" in stack.pins:
        stack.notes.append(f"torch {stack.pins['torch'].version} has no local tag; torch.version.cuda says {data['torch_cuda']}")
        pin = stack.pins["torch"]
        stack.pins["torch"] = type(pin)(
            pin.name, pin.version, "cu" + str(data["torch_cuda"]).replace(".", ""), pin.where + f" (CUDA {data['torch_cuda']} from torch.version.cuda)"
        )
    return stack
