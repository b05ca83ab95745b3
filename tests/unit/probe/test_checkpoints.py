"""The probe's `--model PATH` answers a checkpoint that cannot load in one line with exit 2, the loader's
reason included, and never runs what a pickle asks for."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from probes import families, grpo_smoke
from probes.record import ProbeInputError


class Evil:
    def __reduce__(self) -> tuple[Callable[..., int], tuple[str]]:
        return os.system, (f"touch {os.environ.get('EVIL_MARK', '/nonexistent/evil')}",)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ckpt") / "qwen2"
    source = families.resolve("qwen2", 0)
    tokenizer, _ = families.load_tokenizer(source)
    families.build_model(source, "sdpa", tokenizer).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def truncated(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])


def bad_header(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(b"\xff" * 8 + b"{not a header")


def evil_pickle(folder: Path) -> None:
    import torch

    (folder / "model.safetensors").unlink()
    torch.save({"model.embed_tokens.weight": Evil()}, folder / "pytorch_model.bin")


def raw_pickle(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps({"x": Evil()}))


def no_weights(folder: Path) -> None:
    (folder / "model.safetensors").unlink()


def wrong_shapes(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "hidden_size": 128}))


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (truncated, "SafetensorError"),
        (bad_header, "SafetensorError"),
        (evil_pickle, "cannot load"),
        (raw_pickle, "because UnpicklingError"),
        (no_weights, "Error no file named"),
        (wrong_shapes, "Error(s) in loading state_dict"),
    ],
    ids=["truncated", "bad-header", "refused-pickle", "raw-pickle", "no-weights", "wrong-shapes"],
)
def test_a_checkpoint_that_cannot_load_is_one_line_of_bad_input(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: Callable[[Path], None], said: str
) -> None:
    mark = tmp_path / "RAN"
    monkeypatch.setenv("EVIL_MARK", str(mark))
    folder = tmp_path / "ckpt"
    shutil.copytree(checkpoint, folder)
    damage(folder)
    with pytest.raises(ProbeInputError) as caught:
        families.load_checkpoint(str(folder), "sdpa")
    message = str(caught.value)
    assert message.startswith(f"the checkpoint in {folder} cannot load: ") and said in message and "\n" not in message
    assert not mark.exists()  # the pickle's os.system never ran


def test_the_probe_exits_2_with_the_line(checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "ckpt"
    shutil.copytree(checkpoint, folder)
    truncated(folder)
    assert grpo_smoke.main(["--out", str(tmp_path / "out"), "--model", str(folder), "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "grpo_smoke.py: error: the checkpoint in" in err and "Traceback" not in err
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["error"]["type"] == "ProbeInputError" and "SafetensorError" in result["error"]["message"]


def test_a_good_checkpoint_still_loads_its_own_class(checkpoint: Path) -> None:
    assert type(families.load_checkpoint(str(checkpoint), "sdpa")).__name__ == "Qwen2ForCausalLM"
