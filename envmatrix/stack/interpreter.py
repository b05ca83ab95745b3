"""An interpreter's installed distributions read into a stack (`init --current [PYTHON]`): the running one,
or another one such as a matrix venv's, asked with a standard-library snippet run in it (`-I`: no user site,
no PYTHONPATH), so the other interpreter needs nothing of envmatrix installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def read_interpreter(python: str | None = None) -> Stack:
    """The distributions installed in `python` (default: this interpreter) as exact pins."""
    exe = python or sys.executable
    if python is not None and not Path(python).is_file():
        raise InputError(f"--current {python}: no such interpreter; give the path of a python executable (e.g. .envmatrix/venvs/<build>/bin/python)")
    try:
        done = subprocess.run([exe, "-I", "-c", SNIPPET], capture_output=True, timeout=INTERPRETER_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendError(f"{exe}: could not ask it for its distributions: {exc}") from None
    out = done.stdout[:MAX_INTERPRETER_OUTPUT_BYTES]
    try:
        data = json.loads(out)
        dists = data["dists"]
        py = str(data["python"])
    except (ValueError, KeyError, TypeError):
        said = printable(done.stderr.decode(errors="replace").strip()[-300:])
        raise BackendError(f"{exe}: did not answer with its distributions (exit {done.returncode}): {said or 'no output'}") from None
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
