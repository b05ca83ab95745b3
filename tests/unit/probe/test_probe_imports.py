"""The probe runs inside the environment under test: every probes/*.py imports only the standard library,
torch, transformers, tokenizers, peft and its own package (read with ast, nothing is imported)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PROBES = Path(__file__).resolve().parents[3] / "probes"
ALLOWED = {"torch", "transformers", "tokenizers", "peft", "probes", "__future__"}
#: TRL's trainer path (trainer: trl) may import TRL and what its trainer takes (DeepSpeed under its ZeRO plugin);
#: the engines (parallel: zero2, zero3) DeepSpeed; the chat module jinja2, the library transformers renders chat
#: templates with (it parses a template with it to bound its constants before anything renders, and does without it
#: where it is missing: transformers could not render then either); no other module may.
ALLOWED_IN = {"trl_trainer.py": {"trl", "datasets", "accelerate", "vllm", "deepspeed"}, "engines.py": {"deepspeed"}, "chat.py": {"jinja2"}}


def imported_roots(tree: ast.AST) -> set[str]:
    """Top-level names of every import in a module, wherever it sits (functions included)."""
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__"):
            roots.add("<dynamic import>")
    return roots


def outside(source: str, extra: set[str] = frozenset()) -> set[str]:  # type: ignore[assignment]
    return {r for r in imported_roots(ast.parse(source)) if r not in ALLOWED | extra and r not in sys.stdlib_module_names}


@pytest.mark.parametrize("path", sorted(PROBES.glob("*.py")), ids=lambda p: p.name)
def test_probe_module_imports_only_the_allowed_set(path: Path) -> None:
    assert outside(path.read_text(), ALLOWED_IN.get(path.name, set())) == set(), f"{path.name} imports outside stdlib/torch/transformers/tokenizers/peft"


def test_the_check_can_fail() -> None:
    assert outside("import yaml\nfrom envmatrix import spec\ndef f():\n    import pandas\n") == {"yaml", "envmatrix", "pandas"}
    assert outside("import importlib\nimportlib.import_module('docker')\n") == {"<dynamic import>"}
    assert outside("import json, torch.nn\nfrom probes import grpo\nfrom . import x\n") == set()


def test_only_the_trl_module_may_import_trl() -> None:
    assert outside("import trl\n") == {"trl"}
    assert outside("import trl\n", ALLOWED_IN["trl_trainer.py"]) == set()


def test_there_are_probe_modules() -> None:
    assert (PROBES / "grpo_smoke.py").exists() and len(list(PROBES.glob("*.py"))) >= 2


def test_engines_import_deepspeed_only_inside_functions() -> None:
    """A DDP or FSDP2 cell runs where deepspeed is not installed: importing engines.py must not need it."""
    tree = ast.parse((PROBES / "engines.py").read_text())
    top = ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))], type_ignores=[])
    assert "deepspeed" in imported_roots(tree) and "deepspeed" not in imported_roots(top)
