"""The probe's pieces on tiny tensors: masks, rewards, advantages, loss and KL, metrics and bookkeeping,
parity's verdict, and main()'s contract (result.json before the heavy imports, exit statuses, re-entry)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from probes import grpo, grpo_smoke, parity  # noqa: E402
from probes.record import Run  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
EOS, PAD = 9, 0


def test_completion_mask_keeps_up_to_the_first_eos() -> None:
    comp = torch.tensor([[5, EOS, 6, EOS], [5, 6, 7, 8], [EOS, 1, 2, 3]])
    mask, after = grpo.completion_mask(comp, EOS)
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert after.tolist() == [[False, False, True, True], [False] * 4, [False, True, True, True]]


def test_split_samples_cuts_the_prompt_and_blanks_after_eos() -> None:
    seqs = torch.tensor([[1, 2, 5, EOS, 7], [1, 2, 5, 6, 7]])
    seen: list[list[int]] = []
    s = grpo.split_samples(seqs, 2, EOS, PAD, lambda t: [seen.append(r) or str(r) for r in t.tolist()])  # type: ignore[func-returns-value]
    assert s.completions.tolist() == [[5, EOS, 7], [5, 6, 7]]
    assert seen == [[5, EOS, PAD], [5, 6, 7]] and s.mask.tolist() == [[1, 1, 0], [1, 1, 1]]


def test_reward_is_the_share_of_plain_characters() -> None:
    assert grpo.reward_fn("ab 1") == 1.0 and grpo.reward_fn("") == 0.0
    assert grpo.reward_fn("a!") == 0.5 and grpo.reward_fn("é") == 0.0
    assert grpo.rewards_for(["a", "!", "a!", "aa"], 2).tolist() == [[1.0, 0.0], [0.5, 1.0]]


def test_advantages_biased_and_unbiased() -> None:
    r = torch.tensor([[1.0, 0.0], [2.0, 2.0]])
    biased = grpo.advantages(r, "biased")  # std 0.5 → ±1/(0.5+eps)
    unbiased = grpo.advantages(r, "unbiased")  # std 0.7071
    assert biased[:2].tolist() == pytest.approx([0.5 / (0.5 + grpo.ADV_EPS), -0.5 / (0.5 + grpo.ADV_EPS)])
    assert unbiased[:2].tolist() == pytest.approx([0.5 / (math.sqrt(0.5) + grpo.ADV_EPS), -0.5 / (math.sqrt(0.5) + grpo.ADV_EPS)])
    assert biased[2:].tolist() == [0.0, 0.0] and unbiased[2:].tolist() == [0.0, 0.0]  # a tied group teaches nothing


def test_one_generation_gives_nan_advantages_only_when_unbiased() -> None:
    r = torch.tensor([[0.3], [0.7]])
    assert grpo.advantages(r, "biased").tolist() == [0.0, 0.0]
    assert all(math.isnan(x) for x in grpo.advantages(r, "unbiased").tolist())
    with pytest.raises(ValueError, match="std must be one of"):
        grpo.advantages(r, "sample")


def test_token_logps_pick_the_taken_tokens() -> None:
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]]))
    assert grpo.token_logps(logits, torch.tensor([[0, 2]])).exp()[0].tolist() == pytest.approx([0.5, 0.8])


def test_k3_kl_is_zero_at_equality_and_positive_otherwise() -> None:
    lp = torch.tensor([[-1.0, -2.0]])
    assert grpo.k3_kl(lp, lp).tolist() == [[0.0, 0.0]]
    assert (grpo.k3_kl(lp, lp + torch.tensor([[0.5, -0.5]])) > 0).all()
    # its expectation under the policy is KL(policy || ref): two-outcome check
    p, q = torch.tensor([0.7, 0.3]), torch.tensor([0.4, 0.6])
    expected = float((p * (p / q).log()).sum())
    assert float((p * grpo.k3_kl(p.log(), q.log())).sum()) == pytest.approx(expected, rel=1e-5)


def test_loss_value_is_minus_the_mean_advantage_and_its_gradient_the_advantage() -> None:
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-1.0, -1.0, -1.0]], requires_grad=True)
    adv = torch.tensor([2.0, -1.0])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    loss, kl = grpo.grpo_loss(logp, adv, mask)
    assert kl is None and loss.item() == pytest.approx(-(2.0 - 1.0) / 2)  # exp(0) = 1 per token
    loss.backward()
    assert logp.grad is not None
    # d/dlogp of -A * exp(0) per token, averaged over a sequence's kept tokens, then over 2 sequences
    assert logp.grad[0].tolist() == pytest.approx([-2.0 / 2 / 2, -2.0 / 2 / 2, 0.0])
    assert logp.grad[1].tolist() == pytest.approx([1.0 / 3 / 2] * 3)


def test_loss_adds_beta_times_k3() -> None:
    logp = torch.tensor([[-1.0, -1.0]])
    ref = torch.tensor([[-1.5, -0.5]])
    mask = torch.ones(1, 2)
    loss, kl = grpo.grpo_loss(logp, torch.tensor([0.0]), mask, beta=0.5, ref_logp=ref)
    k3 = grpo.k3_kl(logp, ref).mean().item()
    assert kl == pytest.approx(k3) and loss.item() == pytest.approx(0.5 * k3)


def test_metrics_row_names_and_values() -> None:
    rewards = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    row = grpo.metrics_row(3, 0.25, 1.5, rewards, torch.tensor([[1, 1], [1, 0], [1, 1], [0, 0]]), ["a", "a", "b", "c"], 0.123456, None)
    assert row == {
        "step": 3,
        "loss": 0.25,
        "grad_norm": 1.5,
        "reward": 0.5,
        "reward_std": 0.25,
        "frac_reward_zero_std": 0.5,
        "completions/mean_length": 1.25,
        "distinct_ratio": 0.75,
        "step_time": 0.1235,
    }
    assert grpo.metrics_row(1, 0.0, 0.0, rewards, torch.ones(4, 1), ["a"] * 4, 0.0, 0.01)["kl"] == 0.01


def test_step_book_tracks_grads_changes_and_the_first_nonfinite_step() -> None:
    a, b = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    trainable = {"a": a, "b": b}
    book = grpo.StepBook.start(trainable)
    (a * torch.tensor([1.0, 0.0])).sum().backward()
    b.grad = torch.zeros(2)
    book.note_grads({n: p.grad for n, p in trainable.items()})
    with torch.no_grad():
        a.add_(1.0)
    book.note_row({"step": 1, "loss": 0.0, "grad_norm": 1.0})
    book.note_row({"step": 2, "loss": float("nan"), "grad_norm": 1.0})
    book.note_row({"step": 3, "loss": float("inf"), "grad_norm": 1.0})
    summary = book.params_summary(trainable)
    assert book.first_nonfinite_step == 2 and book.grad_norms == [1.0, 1.0, 1.0]
    assert summary == {
        "trainable": 2,
        "with_grad": 1,
        "without_grad": ["b"],
        "changed": 1,
        "unchanged": ["b"],
        "all_got_grad": False,
        "all_changed": False,
    }


def test_parity_verdict_is_relative_to_the_same_dtype_baseline() -> None:
    ref = torch.ones(4)
    ok = parity.verdict(ref, ref * 1.01, ref * 1.01)
    bad = parity.verdict(ref, ref * 1.1, ref * 1.01)
    nan = parity.verdict(ref, ref * float("nan"), ref)
    assert ok["within_tolerance"] and ok["rel_err"] == pytest.approx(0.01)
    assert not bad["within_tolerance"] and bad["tolerance"] == pytest.approx(0.02001)
    assert not nan["within_tolerance"]


def test_run_writes_result_and_metrics(tmp_path: Path) -> None:
    run = Run(out=tmp_path, rank=0, world=1, options={"steps": 1})
    run.save()
    run.open_metrics()
    run.emit({"step": 1, "loss": float("nan")})
    run.close()
    assert json.loads((tmp_path / "result.json").read_text())["stage"] == "import"
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1, "loss": NaN}\n'
    Run(out=tmp_path, rank=1, world=2, options={}).save()
    assert (tmp_path / "result.rank1.json").exists() and not list(tmp_path.glob("*.tmp*"))


def test_importing_the_probe_runs_nothing_and_imports_no_torch() -> None:
    code = "import sys, probes.grpo_smoke as p; print(sorted(m for m in ('torch', 'transformers', 'probes.train') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_bad_options_exit_2_and_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert grpo_smoke.main(["--out", str(tmp_path / "o"), "--dtype", "fp8"]) == 2
    assert "invalid choice" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_a_crash_in_the_heavy_imports_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise ImportError("libcudart.so.12: cannot open shared object file")

    monkeypatch.setattr(grpo_smoke, "preload", broken)
    for attempt in range(2):  # main() is re-entrant: a second call in the same process starts afresh
        out = tmp_path / str(attempt)
        assert grpo_smoke.main(["--out", str(out), "--steps", "1"]) == 1
        result = json.loads((out / "result.json").read_text())
        assert result["stage"] == "import" and not result["finished"]
        assert result["error"] == {"type": "ImportError", "message": "libcudart.so.12: cannot open shared object file", "stage": "import"}
        assert result["options"]["steps"] == 1


def test_kernel_judge_names_what_went_wrong() -> None:
    from probes import kernels

    label = {"model": "m", "op": "qkv_proj", "dtype": "bf16"}

    def check(got: list[torch.Tensor], ref: list[torch.Tensor]) -> kernels.Check:
        return kernels.Check(label, lambda: (got, ref))

    def raises() -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        raise RuntimeError("CUBLAS_STATUS_EXECUTION_FAILED")

    one = torch.ones(4)
    err, failure = kernels.judge(check([one * 1.001], [one]))
    assert err == pytest.approx(0.001, rel=1e-3) and failure is None
    assert kernels.judge(check([one * float("inf")], [one]))[1] == {**label, "problem": "non_finite"}
    err, failure = kernels.judge(check([one * 1.5], [one]))
    assert failure is not None and failure["problem"] == "mismatch" and err == pytest.approx(0.5)
    assert kernels.judge(kernels.Check(label, raises)) == (None, {**label, "problem": "raised", "error": "RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED"})


def test_kernel_shapes_are_the_published_layer_sizes_and_reduce_on_cpu() -> None:
    from probes import kernels

    llama = next(s for s in kernels.SHAPES if s.model == "Llama-3-8B")
    assert kernels.gemms(llama) == {"qkv_proj": (4096, 6144), "o_proj": (4096, 4096), "gate_up_proj": (4096, 28672), "down_proj": (14336, 4096)}
    small = kernels.scaled(llama, 16)
    assert (small.hidden, small.intermediate, small.heads, small.kv_heads, small.head_dim) == (256, 896, 8, 2, 128)
    assert kernels.scaled(llama, 1) is llama


def test_images_repeat_per_generation_in_sequence_order() -> None:
    from probes import vision

    grid = torch.tensor([[1, 2, 2], [1, 2, 4]])
    pixels = torch.arange(12).view(12, 1).float()  # image 0: rows 0-3, image 1: rows 4-11
    rep, rep_grid = vision.repeat_images(pixels, grid, 2)
    assert rep.view(-1).tolist() == [0, 1, 2, 3] * 2 + list(range(4, 12)) * 2
    assert rep_grid.tolist() == [[1, 2, 2], [1, 2, 2], [1, 2, 4], [1, 2, 4]]


def test_image_prompts_carry_one_placeholder_per_merged_patch() -> None:
    from probes import vision

    prompts = vision.image_prompts(["a", "b", "c", "d"], 2, "<s>", "P", "</s>")
    assert [p.count("P") for p in prompts] == [vision.image_tokens(g, 2) for g in vision.GRIDS] == [4, 2, 6, 1]
    assert prompts[1] == "<s>PP</s>b"


def test_a_vllm_cells_tiny_model_has_the_engines_head_size_on_every_device() -> None:
    """The shape is chosen for vLLM, not the device: head size 32 on CPU and GPU alike (16 is the families' own)."""
    from probes import families, train

    text = families.ModelSource(family="qwen2", path=None)
    assert train.engine_head_dim(True, text) == train.VLLM_HEAD_DIM == 32
    assert train.engine_head_dim(False, text) is None
    assert train.engine_head_dim(True, families.ModelSource(family="qwen2_5_vl", path=None, vision=True)) is None
    assert train.engine_head_dim(True, families.ModelSource(family=None, path="/some/checkpoint")) is None
