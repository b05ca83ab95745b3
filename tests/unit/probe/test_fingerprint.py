"""The numeric fingerprint (probes/fingerprint.py): reference weights that depend on nothing but the parameter's
name and shape, numbers that repeat exactly, and the drift control's perturbation that shows in them."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from probes import families, fingerprint, train  # noqa: E402


def test_uniform_is_shake256_and_nothing_else() -> None:
    # SHAKE-256 is a standard: these bits hold on every platform, torch and Python release
    u = fingerprint.uniform("envmatrix", 3)
    import hashlib

    raw = hashlib.shake_256(b"envmatrix").digest(12)
    expected = [int.from_bytes(raw[i : i + 4], "little", signed=True) / 2**31 for i in (0, 4, 8)]
    assert u.tolist() == expected
    assert all(-1 <= x < 1 for x in fingerprint.uniform("k", 1000).tolist())


def test_names_are_read_without_the_wrappers_releases_add() -> None:
    old, new = "model.layers.0.self_attn.q_proj.weight", "model.language_model.layers.0.self_attn.q_proj.weight"
    assert fingerprint.canonical(old) == fingerprint.canonical(new) == "layers.0.self_attn.q_proj.weight"
    a = fingerprint.reference_tensor(old, (8, 4), 0.0)
    assert torch.equal(a, fingerprint.reference_tensor(new, (8, 4), 0.0))
    assert a.abs().max() <= math.sqrt(3 / 4) and not torch.equal(a, fingerprint.reference_tensor(old, (4, 8), 0.0))
    norm = fingerprint.reference_tensor("model.norm.weight", (64,), 1.0)
    assert (norm - 1).abs().max() <= fingerprint.VECTOR_NOISE


def test_neutral_value_is_the_init_constant() -> None:
    assert fingerprint.neutral(torch.ones(4)) == 1.0 and fingerprint.neutral(torch.zeros(4)) == 0.0
    assert fingerprint.neutral(torch.tensor([0.1, 0.2])) == 0.0


@pytest.fixture(scope="module")
def qwen2() -> tuple[families.ModelSource, object]:
    source = families.resolve("qwen2", 0)
    tokenizer, _ = families.load_tokenizer(source)
    return source, tokenizer


def test_weights_do_not_depend_on_torchs_generator(qwen2: tuple[families.ModelSource, object]) -> None:
    _, tokenizer = qwen2
    digests = []
    for seed in (0, 1):
        model = families.build_model(families.ModelSource(family="qwen2", path=None, seed=seed), "eager", tokenizer)
        digests.append(fingerprint.load_reference_weights(model))
    assert digests[0] == digests[1]


def test_numbers_repeat_and_the_control_moves_them(qwen2: tuple[families.ModelSource, object]) -> None:
    source, tokenizer = qwen2
    cpu = torch.device("cpu")
    a = fingerprint.measure(source, "sdpa", "fp32", tokenizer, train.PROMPTS, cpu, "none")
    b = fingerprint.measure(source, "sdpa", "fp32", tokenizer, train.PROMPTS, cpu, "none")
    assert a == b
    assert a["logp"]["tokens"] == len(a["logp"]["samples"]) > 0 and a["logp"]["finite"]
    assert [s["step"] for s in a["steps"]] == list(range(fingerprint.STEPS))
    assert set(a["steps"][0]["grad_norm_groups"]) == {"attention", "embed", "head", "mlp", "norm"}
    moved = fingerprint.measure(source, "sdpa", "fp32", tokenizer, train.PROMPTS, cpu, "drift")
    assert moved["weights_digest"] == a["weights_digest"] and moved["logp"]["digest"] != a["logp"]["digest"]
    assert moved["config"]["rms_norm_eps"] == pytest.approx(a["config"]["rms_norm_eps"] * fingerprint.PERTURB_EPS)
    worst = max(abs(x[2] - y[2]) for x, y in zip(a["logp"]["samples"], moved["logp"]["samples"], strict=True))
    assert 1e-4 < worst < 1e-2  # slight, and beyond fp32's tolerance (envmatrix/outputs/drift.py)


def test_bf16_measures_its_own_noise(qwen2: tuple[families.ModelSource, object]) -> None:
    source, tokenizer = qwen2
    fp = fingerprint.measure(source, "eager", "bf16", tokenizer, train.PROMPTS, torch.device("cpu"), "none")
    assert 0 < fp["noise"]["logp_vs_fp32"] < 0.5


def test_a_checkpoint_saved_from_a_family_is_measured_as_the_family(qwen2: tuple[families.ModelSource, object]) -> None:
    source, tokenizer = qwen2
    saved = families.ModelSource(family=None, path="/nonexistent/.checkpoint-rank0", seed=0, origin="qwen2")  # gen-config's near-greedy save
    cpu = torch.device("cpu")
    a = fingerprint.measure(source, "eager", "fp32", tokenizer, train.PROMPTS, cpu, "none")
    assert fingerprint.measure(saved, "eager", "fp32", tokenizer, train.PROMPTS, cpu, "none") == a
