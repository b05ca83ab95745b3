"""Hostile model folders for `envmatrix preflight --model-config`, by mechanism: configs that cannot build at
full size (each said ok before issue 33, because the shrink overwrote the value), values of the wrong type,
files beyond every bound, tokenizers of millions of tokens, chat templates that loop, grow, include or
escape. Each case damages a copy of a good full-size folder (Qwen3-8B's config and a tokenizer with its
chat template). Shared by tests/hostile/test_model_folders.py and bench/bench_hostile_inputs.py."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from user_models import QWEN3_30B_A3B

#: Where the refusal comes from: `host` (preflight reads the folder before anything runs), `probe` (the probe,
#: in the environment under test: transformers' classes, the meta-device build, the template sandbox).
HOST, PROBE = "host", "probe"


@dataclass(frozen=True)
class Case:
    name: str
    damage: Callable[[Path], None]
    said: str
    where: str = HOST


def config_change(**change: Any) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **change}))

    return damage


def config_text(replace: str, by: str) -> Callable[[Path], None]:
    """Edit config.json as text (NaN, Infinity and huge numbers are not what json.dumps writes from Python)."""

    def damage(folder: Path) -> None:
        text = (folder / "config.json").read_text()
        assert replace in text, replace
        (folder / "config.json").write_text(text.replace(replace, by, 1))

    return damage


def padded(name: str, size: int) -> Callable[[Path], None]:
    """`name` grown to `size` bytes by one long string value (a 200 MB config.json once took 297 s and 8.8 GB)."""

    def damage(folder: Path) -> None:
        data = json.loads((folder / name).read_text())
        head = json.dumps({**data, "padding": ""})[:-2]
        with (folder / name).open("w") as fh:
            fh.write(head)
            block = "x" * (1 << 20)
            for _ in range(size >> 20):
                fh.write(block)
            fh.write('"}')

    return damage


def nested(name: str, levels: int) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        (folder / name).write_text('{"model_type": "qwen3", "deep": ' + "[" * levels + "]" * levels + "}")

    return damage


def digits(name: str, key: str, count: int) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        text = json.dumps({**json.loads((folder / name).read_text()), key: 0})
        (folder / name).write_text(text.replace(f'"{key}": 0', f'"{key}": {"9" * count}'))

    return damage


def write_tokenizer(folder: Path, tokens: int, *, specials_last: bool, as_added: bool = False) -> None:
    """A word-level tokenizer of `tokens` tokens (t0, ~1, t2, ...: words and punctuation, so sampled completions
    earn different rewards) with pad/bos/eos/unk first or last, written as tokenizer.json in chunks (no dict of
    millions in memory); `as_added`: the tokens are added tokens instead."""
    specials = ["<pad>", "<s>", "</s>", "[UNK]"]
    base = tokens if specials_last else 0
    special_ids = {s: base + i for i, s in enumerate(specials)}
    first = 0 if specials_last else len(specials)

    def entries(lo: int, hi: int) -> str:
        return ",".join(f'"{"t~"[i % 2]}{i}":{first + i}' for i in range(lo, hi))

    flags = {"single_word": False, "lstrip": False, "rstrip": False}
    added = [{"id": i, "content": s, **flags, "normalized": False, "special": True} for s, i in special_ids.items()]
    with (folder / "tokenizer.json").open("w") as fh:
        fh.write('{"version":"1.0","truncation":null,"padding":null,"added_tokens":')
        if as_added:
            fh.write("[" + ",".join(json.dumps(a) for a in added))
            rest = ',"single_word":false,"lstrip":false,"rstrip":false,"normalized":true,"special":false}'
            for lo in range(0, tokens, 100_000):
                fh.write("".join(f',{{"id":{first + i},"content":"t{i}"{rest}' for i in range(lo, min(tokens, lo + 100_000))))
            fh.write("]")
            vocab = {s: i for s, i in special_ids.items()}
            fh.write(',"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,')
            fh.write('"model":{"type":"WordLevel","vocab":' + json.dumps(vocab) + ',"unk_token":"[UNK]"}}')
            return
        fh.write(json.dumps(added))
        fh.write(',"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,"model":{"type":"WordLevel","vocab":{')
        fh.write(",".join(f'"{s}":{i}' for s, i in special_ids.items()))
        for lo in range(0, tokens, 100_000):
            fh.write("," + entries(lo, min(tokens, lo + 100_000)))
        fh.write('},"unk_token":"[UNK]"}}')
    settings = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "[UNK]"}
    (folder / "tokenizer_config.json").write_text(json.dumps({**settings, "model_max_length": 4096}))
    for name in ("special_tokens_map.json", "chat_template.jinja"):
        (folder / name).unlink(missing_ok=True)


def sparse(name: str, size: int) -> Callable[[Path], None]:
    """A file of `size` bytes that takes no room on disk (a hole): what a tokenizer class named in the user's own
    tokenizer_config.json would read in full, whatever its name."""

    def damage(folder: Path) -> None:
        with (folder / name).open("wb") as fh:
            fh.truncate(size)

    return damage


def many_templates(count: int) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        extra = folder / "additional_chat_templates"
        extra.mkdir(exist_ok=True)
        for i in range(count):
            (extra / f"t{i:03d}.jinja").write_text("{{ messages }}")

    return damage


def settings_change(name: str, **change: Any) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        path = folder / name
        data = json.loads(path.read_text()) if path.exists() else {}
        path.write_text(json.dumps({**data, **change}))

    return damage


def tokenizer_of(tokens: int, *, specials_last: bool, as_added: bool = False) -> Callable[[Path], None]:
    return lambda folder: write_tokenizer(folder, tokens, specials_last=specials_last, as_added=as_added)


def template(text: str) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        (folder / "chat_template.jinja").write_text(text)

    return damage


def fifo(name: str) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        os.mkfifo(folder / name)

    return damage


def link(name: str, target: str) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        (folder / name).unlink(missing_ok=True)
        (folder / name).symlink_to(target)

    return damage


def moe(**change: Any) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        (folder / "config.json").write_text(json.dumps({**QWEN3_30B_A3B, **change}))

    return damage


MB = 1_000_000
CASES = [
    # the five false-ok configs of the hostile pass, and their kin
    Case("hidden-negative", config_change(hidden_size=-64), "hidden_size: -64 is out of range [1, 131072]"),
    Case("hidden-zero", config_change(hidden_size=0), "hidden_size: 0 is out of range"),
    Case("heads-zero", config_change(num_attention_heads=0), "num_attention_heads: 0 is out of range"),
    Case("kv-not-dividing", config_change(num_key_value_heads=5), "num_key_value_heads: 5 does not divide num_attention_heads 32"),
    Case("layers-float", config_change(num_hidden_layers=36.5), "num_hidden_layers: must be an integer, got 36.5"),
    Case("kv-zero", config_change(num_key_value_heads=0), "num_key_value_heads: 0 is out of range"),
    Case("kv-more-than-heads", config_change(num_key_value_heads=64), "num_key_value_heads: 64 does not divide num_attention_heads 32"),
    Case("head-dim-negative", config_change(head_dim=-128), "head_dim: -128 is out of range"),
    Case("vocab-zero", config_change(vocab_size=0), "vocab_size: 0 is out of range"),
    Case("intermediate-negative", config_change(intermediate_size=-1), "intermediate_size: -1 is out of range"),
    Case("routed-more-than-experts", moe(num_experts_per_tok=256), "num_experts_per_tok: 256 is more than the 128 experts"),
    Case("experts-times-layers", moe(num_experts=4096, num_hidden_layers=512), "expert blocks, more than 32,768"),
    # values not typed
    Case("width-string", config_change(hidden_size="4096"), "hidden_size: must be an integer, got '4096'"),
    Case("width-float", config_change(intermediate_size=12288.5), "intermediate_size: must be an integer, got 12288.5"),
    Case("layers-bool", config_change(num_hidden_layers=True), "num_hidden_layers: must be an integer, got a boolean"),
    Case("layers-list-of-strings", config_change(num_hidden_layers=["36"]), "num_hidden_layers[0]: must be an integer, got '36'"),
    Case("eps-nan", config_text('"rms_norm_eps": 1e-06', '"rms_norm_eps": NaN'), "rms_norm_eps: nan is out of range [0, 1]"),
    Case("eps-infinity", config_text('"rms_norm_eps": 1e-06', '"rms_norm_eps": Infinity'), "rms_norm_eps: inf is out of range [0, 1]"),
    Case("eps-negative", config_change(rms_norm_eps=-1e-6), "rms_norm_eps: -1e-06 is out of range"),
    Case("eps-string", config_change(rms_norm_eps="1e-6"), "rms_norm_eps: must be a number, got '1e-6'"),
    Case("width-infinity", config_text('"hidden_size": 4096', '"hidden_size": -Infinity'), "hidden_size: must be an integer, got -inf"),
    Case("width-nan", config_text('"hidden_size": 4096', '"hidden_size": NaN'), "hidden_size: must be an integer, got nan"),
    Case("arch-int", config_change(architectures=[5]), "architectures[0]: must be a model class name such as LlamaForCausalLM, got 5"),
    Case("arch-dotted", config_change(architectures=["os.system"]), "architectures[0]: must be a model class name"),
    Case("arch-not-list", config_change(architectures="Qwen3ForCausalLM"), "architectures: must be a list of model class names"),
    # bounds on the files
    Case("config-200MB", padded("config.json", 200 * MB), "bytes, more than a model's config.json may hold (4 MiB)"),
    Case("config-50MB", padded("config.json", 50 * MB), "more than a model's config.json may hold"),
    Case("config-deep", nested("config.json", 100_000), "config.json: nested more than 32 levels deep"),
    Case("tokenizer-config-deep", nested("tokenizer_config.json", 100_000), "tokenizer_config.json: nested more than 32 levels deep"),
    Case("tokenizer-json-deep", nested("tokenizer.json", 100_000), "tokenizer.json: nested more than 64 levels deep"),
    Case("config-5000-digits", digits("config.json", "vocab_size", 5000), "config.json: a number of 5,000 digits"),
    Case("tokenizer-config-5000-digits", digits("tokenizer_config.json", "model_max_length", 5000), "a number of 5,000 digits"),
    Case("tokenizer-2M", tokenizer_of(2_000_000, specials_last=True), "tokenizer.json: 2,000,004 tokens, more than a tokenizer may hold (524,288"),
    Case("tokenizer-2M-specials-first", tokenizer_of(2_000_000, specials_last=False), "2,000,004 tokens, more than a tokenizer may hold"),
    Case("tokenizer-550k-added", tokenizer_of(550_000, specials_last=False, as_added=True), "550,004 tokens, more than a tokenizer may hold"),
    Case("config-fifo", fifo("config.json"), "config.json: not a regular file (a FIFO)"),
    Case("tokenizer-dev-zero", link("tokenizer.json", "/dev/zero"), "tokenizer.json: not a regular file (a device)"),
    Case("template-file-1MB", template("{{ messages }}" + " " * MB), "chat_template.jinja: 1,000,014 bytes, more than a chat template may hold"),
    Case("config-a-list", lambda f: (f / "config.json").write_text("[" + (f / "config.json").read_text() + "]"), "a list in JSON, not an object"),
    # the second hostile pass (2026-11-27): settings transformers takes by their truth or passes on unchecked, and files
    # a tokenizer class reads whatever their name
    Case("rope-factor-negative", config_change(rope_scaling={"rope_type": "linear", "factor": -2.0}), "rope_scaling.factor: -2.0 is out of range [1,"),
    Case(
        "rope-factor-nan",
        config_text('"rope_scaling": null', '"rope_scaling": {"rope_type": "yarn", "factor": NaN}'),
        "rope_scaling.factor: nan is out of range",
    ),
    Case("rope-not-object", config_change(rope_scaling="linear"), "rope_scaling: must be an object such as"),
    Case("rope-type-number", config_change(rope_scaling={"rope_type": 3, "factor": 2.0}), "rope_scaling.rope_type: must be a name"),
    Case("dtype-float128", config_change(torch_dtype="float128"), "torch_dtype: 'float128' is not a torch dtype"),
    Case("dtype-object", config_change(torch_dtype={"x": 1}), "torch_dtype: {'x': 1} is not a torch dtype"),
    Case("tie-string", config_change(tie_word_embeddings="yes"), "tie_word_embeddings: must be true or false, got 'yes'"),
    Case("eos-negative", config_change(eos_token_id=-5), "eos_token_id: must be a token id (an integer from 0 below vocab_size"),
    Case("eos-beyond-vocab", config_change(eos_token_id=999_999_999), "eos_token_id: must be a token id"),
    Case("pad-string", config_change(pad_token_id="</s>"), "pad_token_id: must be a token id"),
    Case("quant-not-object", config_change(quantization_config="x"), "quantization_config: must be an object naming its quant_method"),
    Case("template-field-list", settings_change("tokenizer_config.json", chat_template=[1, 2]), "chat_template must be a template's text or a list of"),
    Case("templates-65", many_templates(65), "more than 64 chat templates"),
    Case("vocab-file-any-name-1500MB", sparse("bpe.codes", 1500 * MB), "bpe.codes: 1,500,000,000 bytes"),
    Case(
        "tokenizer-json-any-name-2M",
        lambda f: (write_tokenizer(f, 2_000_000, specials_last=True), (f / "tokenizer.json").rename(f / "tokenizer.4.0.0.json"))[0],
        "tokenizer.4.0.0.json: 2,000,004 tokens, more than a tokenizer may hold",
    ),
    Case(
        "generation-temperature-nan",
        settings_change("generation_config.json", temperature=float("nan")),
        "generation_config.json: temperature: nan is out of range",
    ),
    Case("sliding-window-zero", config_change(use_sliding_window=True, sliding_window=0), "sliding_window: 0 is out of range [1, 2147483647]"),
    Case("dropout-above-one", config_change(attention_dropout=1.5), "attention_dropout: 1.5 is out of range [0, 1]"),
    Case("init-range-nan", config_text('"initializer_range": 0.02', '"initializer_range": NaN'), "initializer_range: nan is out of range"),
    Case("layers-by-another-name", config_change(n_layer=50_000), "n_layer: 50000 is out of range [1, 512]"),
    Case("text-config-a-list", config_change(text_config=[1, 2]), "text_config: must be an object (the sub-model's settings), got [1, 2]"),
    # what only transformers' own classes, the full-size build or the sandbox can find: the probe refuses
    Case("head-dim-odd", config_change(head_dim=3), "head_dim: head_dim 3 is odd; rotary embeddings rotate pairs", PROBE),
    Case(
        "vocab-below-the-tokenizers-ids",
        config_change(vocab_size=100, bos_token_id=None, eos_token_id=None),
        "vocab_size: 100 rows, but the tokenizer gives the run ids up to",
        PROBE,
    ),
    Case(
        "generation-config-refused",
        settings_change("generation_config.json", cache_implementation="no_such_cache"),
        "generation_config.json: transformers",
        PROBE,
    ),
    Case(
        "generation-tokens-negative", settings_change("generation_config.json", max_new_tokens=-5), "generation_config.json: max_new_tokens: -5 is out of range"
    ),
    Case("arch-function", config_change(architectures=["pipeline"]), "architectures[0]: 'pipeline' is not a model class transformers", PROBE),
    Case("arch-other-model", config_change(architectures=["MistralForCausalLM"]), "is not a model class transformers", PROBE),
    Case("act-unknown", config_change(hidden_act="no_such_act"), "cannot build Qwen3ForCausalLM at full size from it: KeyError: 'no_such_act'", PROBE),
    Case("layer-types-short", config_change(layer_types=["full_attention"] * 3), "`num_hidden_layers` (36) must be equal to the number of", PROBE),
    Case("template-loop", template("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"), "still renders after 5 s", PROBE),
    Case("template-huge-string", template("{{ 'x' * 10000000000 }}"), "a constant expression comes to more than 1 MiB", PROBE),
    Case("template-doubling", template("{% set n = namespace(s='x') %}{% for i in range(64) %}{% set n.s = n.s ~ n.s %}{% endfor %}"), "needs more", PROBE),
    Case("template-big-output", template("{% for i in range(99) %}{{ 'x' * 9999 }}{% endfor %}"), "characters for the probe's few one-line user turns", PROBE),
    Case("template-include", template("{% include '/etc/passwd' %}"), "includes or imports another template", PROBE),
    Case("template-escape", template("{{ ''.__class__.__mro__[1].__subclasses__() }}"), "the sandbox stopped it: SecurityError", PROBE),
    Case("template-recursion", template("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), "calls itself without end", PROBE),
    Case("tokenizer-400k-specials-last", tokenizer_of(400_000, specials_last=True), "ids up to 400,003 (unk_token_id), beyond the 300,000", PROBE),
]
BY_NAME = {c.name: c for c in CASES}
