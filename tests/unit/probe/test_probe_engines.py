"""The engines' pure parts: DeepSpeed's config from the scenario, and which modules FSDP2 shards."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from probes import engines  # noqa: E402


def test_zero_config_carries_the_scenario() -> None:
    config = engines.deepspeed_config(3, 2e-3, 16, "fp32")
    assert config["zero_optimization"] == {"stage": 3}
    assert config["train_micro_batch_size_per_gpu"] == 16 and config["gradient_accumulation_steps"] == 1
    assert config["optimizer"] == {"type": "AdamW", "params": {"lr": 2e-3, "weight_decay": 0.0, "torch_adam": True}}
    assert config["gradient_clipping"] == engines.MAX_GRAD_NORM == 1.0
    assert not config["bf16"]["enabled"] and not config["fp16"]["enabled"]
    assert "torch_autocast" not in config  # fp32: nothing to cast


@pytest.mark.parametrize(("dtype", "name"), [("bf16", "bfloat16"), ("fp16", "float16")])
def test_zero_config_keeps_fp32_weights_and_autocasts_as_the_scenario_asks(dtype: str, name: str) -> None:
    config = engines.deepspeed_config(2, 1e-3, 4, dtype)
    assert not config["bf16"]["enabled"] and not config["fp16"]["enabled"]
    assert config["torch_autocast"] == {"enabled": True, "dtype": name}
    assert config["zero_optimization"]["stage"] == 2


class Layer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(2, 2)


class Tiny(torch.nn.Module):
    def __init__(self, units: tuple[str, ...] = ("Layer",)) -> None:
        super().__init__()
        self._no_split_modules = list(units)
        self.embed = torch.nn.Embedding(4, 2)
        self.layers = torch.nn.ModuleList([Layer(), Layer()])


def test_fsdp2_shards_the_layers_the_model_names() -> None:
    model = Tiny()
    assert engines.shard_units(model) == list(model.layers)
    assert engines.shard_units(Tiny(())) == []  # then only the root is sharded


def test_one_process_ddp_is_the_model_and_a_plain_optimizer() -> None:
    model = Tiny()
    trainable = dict(model.named_parameters())
    engine, held = engines.make(
        "ddp", model, trainable, lr=1e-2, dtype="fp32", micro_batch=4, device=torch.device("cpu"), ddp={"find_unused_parameters": False, "static_graph": False}
    )
    assert engine.train_model is model and held is trainable and engine.facts() == {"parallel": "ddp", "sharded": False}
    before = engine.whole(trainable)
    model.layers[0].proj(torch.ones(1, 2)).sum().backward()
    grads = engine.whole_grads(trainable)
    assert grads["layers.0.proj.weight"] is not None and grads["embed.weight"] is None
    norm = engine.step(list(trainable.values()))
    assert norm == pytest.approx(6**0.5)  # weight grad [[1,1],[1,1]] and bias grad [1,1]: sqrt(4 + 2), before clipping
    assert not torch.equal(before["layers.0.proj.weight"], trainable["layers.0.proj.weight"])


def test_an_unknown_engine_is_refused() -> None:
    with pytest.raises(ValueError, match="not one of ddp, zero2, zero3, fsdp2"):
        engines.make("zero4", Tiny(), {}, lr=1e-3, dtype="fp32", micro_batch=1, device=torch.device("cpu"), ddp={})
