"""Issue 33 on a GPU: the chat-template sandbox forks a probe that already holds a CUDA context (its address
space is tens of GiB of reserved VA, so the child's RLIMIT_AS must be set above what is mapped), and the
full-size check builds on the meta device while CUDA is initialised. Skipped without a GPU, saying why."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from envmatrix.host.gpus import detect_gpus

GPUS = detect_gpus()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(GPUS.count == 0, reason=f"needs an NVIDIA GPU; this host has none{f' ({GPUS.problem})' if GPUS.problem else ''}"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch with CUDA in this interpreter"),
]


def test_the_template_sandbox_works_beside_a_cuda_context() -> None:
    import torch

    from probes import chat, families

    if not torch.cuda.is_available():
        pytest.skip("torch in this interpreter has no CUDA")
    held = torch.ones(1024, 1024, device="cuda")  # a live context and allocation in the parent
    tok = families.build_tokenizer()
    tok.chat_template = "{% for m in messages %}[{{ m['content'] }}]{% endfor %}"
    assert chat.render(tok, ["hi"], "t") == ["[hi]"]
    tok.chat_template = "{{ 'x' * 10000000000 }}"
    with pytest.raises(chat.TemplateRefused, match="needs more than"):
        chat.render(tok, ["hi"], "t")
    assert float(held.sum()) == 1024 * 1024  # the parent's CUDA state is untouched


def test_the_full_size_check_runs_after_cuda_is_initialised(tmp_path: Path) -> None:
    import torch
    from user_models import LLAMA3_70B

    from probes import fullsize

    torch.cuda.init()
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_70B))
    arch = fullsize.check(LLAMA3_70B, tmp_path, trusted=False)
    assert arch.params == 70_553_706_496 and torch.cuda.memory_allocated() < 1 << 30  # shapes only
