"""`--model PATH` as users have it: checkpoint folders saved in code with the tokenizer quirks real ones have
(no pad token, token_type_ids, a chat template), each trained by the real probe with both trainers where
trl is installed."""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envmatrix.run.execute import probe_command, run_logged
from envmatrix.spec.matrix import Scenario
from envmatrix.verdict.classify import classify
from envmatrix.verdict.runfacts import gather

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs torch and transformers (nox -s tests installs them)"),
]

WORDS = ["hi", "add", "two", "and", "three", "name", "a", "colour", "say", "count", "to", "red", "blue", "one", ":", "user", "assistant"]
CHAT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tokenizer(*, pad: bool, type_ids: bool, chat: bool) -> Any:
    """A word-level fast tokenizer built in code: eos always; a pad token, token_type_ids and a chat template as asked."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    specials = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>", *(["<pad>"] if pad else [])]
    vocab = {w: i for i, w in enumerate([*specials, *WORDS, *(f"w{i}" for i in range(40))])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    names = ["input_ids", "attention_mask", *(["token_type_ids"] if type_ids else [])]
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>", model_input_names=names,
        additional_special_tokens=["<|im_start|>", "<|im_end|>"], **({"pad_token": "<pad>"} if pad else {}),
    )  # fmt: skip
    if chat:
        fast.chat_template = CHAT
    return fast


def checkpoint(folder: Path, kind: str, tok: Any) -> Path:
    """A tiny random model of `kind` (llama, qwen2, mistral) saved with `tok`, as a user's folder would be."""
    import torch
    import transformers

    common = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, tie_word_embeddings=False)  # fmt: skip
    config_class, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[kind]
    torch.manual_seed(0)
    model_class(config_class(**common)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def train(folder: Path, out: Path, trainer: str = "builtin") -> tuple[str, dict[str, Any], str, float]:
    scenario = Scenario(name="user", model=str(folder), steps=2, trainer=trainer)
    log = out / "probe.log"
    start = time.monotonic()
    done = run_logged(probe_command(sys.executable, scenario, out), log, timeout=600)
    facts = gather(out, log, exit_code=done.exit_code, timed_out=done.timed_out)
    return classify(facts).outcome, facts.result or {}, log.read_text(errors="replace"), time.monotonic() - start


SHAPES = {
    "llama-no-pad": ("llama", {"pad": False, "type_ids": False, "chat": False}),
    "mistral-token-type-ids": ("mistral", {"pad": True, "type_ids": True, "chat": False}),
    "qwen2-chat-template-no-pad": ("qwen2", {"pad": False, "type_ids": True, "chat": True}),
}


@pytest.mark.parametrize("shape", SHAPES)
def test_a_users_checkpoint_trains(shape: str, tmp_path: Path) -> None:
    kind, quirks = SHAPES[shape]
    folder = checkpoint(tmp_path / shape, kind, tokenizer(**quirks))
    outcome, result, log, seconds = train(folder, tmp_path / "out")
    assert outcome == "ok", log[-3000:]
    noted = result["model"]["tokenizer"]
    assert noted == {"pad_from_eos": not quirks["pad"], "chat_template": quirks["chat"], "token_type_ids": quirks["type_ids"]}
    print(f"{shape}: {outcome} in {seconds:.1f} s")


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="needs trl (the trl environments of the cpu profile have it)")
def test_a_users_checkpoint_trains_under_trl(tmp_path: Path) -> None:
    folder = checkpoint(tmp_path / "ckpt", "llama", tokenizer(pad=False, type_ids=True, chat=True))
    outcome, result, log, _ = train(folder, tmp_path / "out", trainer="trl")
    assert outcome == "ok", log[-3000:]
    assert result["model"]["tokenizer"]["pad_from_eos"] is True
