"""Hostile model folders for `envmatrix preflight`, by mechanism (model_cases.py), and hostile text.

What the host reads (config.json, tokenizer files, chat-template files) is refused before anything runs:
exit 2, one line naming the file, the field or the bound, no traceback, in a child under RLIMIT_AS = 1 GiB
killed after 30 s (bounded.py); what only the environment can judge (transformers' classes, the full-size
build on the meta device, the chat-template sandbox) is refused by the probe, the same way (integration: it
runs the real probe). Time and memory are figures of bench/bench_hostile_inputs.py, not assertions here,
beyond the bounded child's hang guard and memory ceiling.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from bounded import PEAK_RSS_LIMIT_KIB, ROOT, assert_clean_failure, run_bounded
from model_cases import CASES, HOST, PROBE, Case, write_tokenizer
from user_models import user_model

from envmatrix.cli import main
from probes import untrusted

MATRIX = str(ROOT / "matrix.yaml")
#: Reading a tokenizer of two million tokens to count them costs about 400 MiB (bench_hostile_inputs.py);
#: everything else the host refuses costs about 40.
TOKENIZER_PEAK_KIB = 1 << 20
ESC = "\x1b"


@pytest.fixture(scope="module")
def good_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return user_model(tmp_path_factory.mktemp("base"), "qwen3-8b")


def damaged(good: Path, tmp_path: Path, case: Case) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(good, folder)
    case.damage(folder)
    return folder


@pytest.mark.parametrize("case", [c for c in CASES if c.where == HOST], ids=lambda c: c.name)
def test_the_host_refuses_in_one_line_within_bounds(good_folder: Path, tmp_path: Path, case: Case) -> None:
    folder = damaged(good_folder, tmp_path, case)
    ended = run_bounded(["preflight", "--file", MATRIX, "--profile", "cpu", "--model-config", str(folder)], cwd=tmp_path)
    big = "tokenizer" in case.name and ("M" in case.name or "k" in case.name)
    if big:  # counting two million tokens: more than the 256 MiB other refusals may use, under the 1 GiB bound
        assert ended.peak_rss_kib <= TOKENIZER_PEAK_KIB, ended.peak_rss_kib
        ended.peak_rss_kib = min(ended.peak_rss_kib, PEAK_RSS_LIMIT_KIB)
    assert_clean_failure(ended, 2, says=case.said)
    assert ended.stderr.count("\n") == 1 and str(folder) in ended.stderr


def test_the_cases_cover_every_mechanism_of_the_hostile_pass() -> None:
    names = {c.name for c in CASES}
    for name in ("hidden-negative", "hidden-zero", "heads-zero", "kv-not-dividing", "layers-float"):  # false ok
        assert name in names
    for name in ("width-string", "width-float", "eps-nan", "eps-infinity", "arch-int", "arch-function"):  # untyped
        assert name in names
    for name in ("config-200MB", "config-deep", "tokenizer-config-deep", "config-5000-digits", "tokenizer-2M", "template-loop", "template-huge-string"):
        assert name in names
    assert {c.where for c in CASES} == {HOST, PROBE}


def preflight(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "envmatrix", "preflight", "--file", MATRIX, "--profile", "cpu", "--reports", str(tmp_path / "reports"), *args]
    run_env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "300", **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=run_env, check=False)


@pytest.mark.integration
@pytest.mark.parametrize("case", [c for c in CASES if c.where == PROBE], ids=lambda c: c.name)
def test_the_probe_refuses_what_only_the_environment_can_judge(good_folder: Path, tmp_path: Path, case: Case) -> None:
    folder = damaged(good_folder, tmp_path, case)
    done = preflight(tmp_path, "--model-config", str(folder))
    text = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stderr[-3000:]
    assert case.said in text and "Traceback" not in done.stderr and f"--model-config {folder}" in text


@pytest.mark.integration
def test_a_huge_tokenizer_trains_a_tiny_model_when_the_probes_ids_are_few(good_folder: Path, tmp_path: Path) -> None:
    """400,000 tokens, specials first: the embedding covers the ids the probe uses, not the tokenizer's length."""
    folder = tmp_path / "model"
    shutil.copytree(good_folder, folder)
    write_tokenizer(folder, 400_000, specials_last=False)
    done = preflight(tmp_path, "--model-config", str(folder), "--format", "json")
    answer = json.loads(done.stdout)
    assert (done.returncode, answer["class"]) == (0, "ok"), done.stderr[-3000:]
    assert answer["model"]["params"] < 1_000_000 and answer["model"]["changes"]["vocab_size"] == "151936 → 4096"


def test_escape_sequences_from_a_users_files_never_reach_the_terminal(good_folder: Path, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    shutil.copytree(good_folder, folder)
    grpo = tmp_path / "grpo.json"
    grpo.write_text(json.dumps({f"{ESC}]0;owned{chr(7)}title": 1, f"{ESC}[2J{chr(0x202E)}clear": "x", "learning_rate": 1e-6}))
    args = ["--model-config", str(folder), "--grpo-config", str(grpo), "--matrix", "--backend", "docker"]
    ended = run_bounded(["preflight", "--file", MATRIX, "--profile", "cpu", *args])
    assert ended.status == 2 and "--matrix runs on the venv or host backend" in ended.stderr
    shown = ended.stdout + ended.stderr
    assert "not modelled by the probe" in shown and "\\x1b]0;owned\\x07title" in shown and "\\u202eclear" in shown
    assert ESC not in shown.replace("\x1b[0m", "").replace("\x1b[1m", "") and "\u202e" not in shown and "\x07" not in shown


def test_a_model_type_with_escapes_is_escaped_in_every_line(good_folder: Path, tmp_path: Path) -> None:
    if importlib.util.find_spec("trl") is not None:
        pytest.skip("trl is installed here: --trainer trl would train instead of stopping before the probe")
    folder = tmp_path / "model"
    shutil.copytree(good_folder, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": f"qwen3{ESC}]0;owned{chr(7)}{chr(0x202E)}"}))
    ended = run_bounded(["preflight", "--file", MATRIX, "--profile", "cpu", "--model-config", str(folder), "--trainer", "trl"])
    assert ended.status == 3 and "not run here: trainer: trl needs the trl package" in ended.stderr  # a missing engine: exit 3
    assert "preflight: qwen3\\x1b]0;owned\\x07\\u202e from" in ended.stdout
    assert ESC not in ended.stdout + ended.stderr and "\u202e" not in ended.stdout + ended.stderr


def test_classify_reads_what_is_not_a_regular_file_within_a_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(untrusted, "LOG", untrusted.Kind("a training log", 1 << 20, hint="classify the end of it"))
    assert main(["classify", "/dev/zero"]) == 0
    err = capsys.readouterr().err
    assert "/dev/zero is a device, not a regular file: read up to 1 MiB of it" in err and "classified the first 1 MiB only" in err
    fifo = tmp_path / "log.fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with fifo.open("w") as fh:
            fh.write("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n")

    writer = threading.Thread(target=write)
    writer.start()
    assert main(["classify", str(fifo)]) == 0
    writer.join()
    out = capsys.readouterr()
    assert "class:    oom" in out.out and "is a FIFO, not a regular file" in out.err and "classified the first" not in out.err
    assert main(["classify", str(tmp_path)]) == 2 and "a folder, not a training log" in capsys.readouterr().err


def test_classify_escapes_the_log_line_it_quotes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "train.log"
    log.write_bytes(b"RuntimeError: CUDA out of memory \x1b]0;owned\x07 \xe2\x80\xae reversed\n")
    assert main(["classify", str(log)]) == 0
    out = capsys.readouterr().out
    assert "class:    oom" in out and "\x07" not in out and "\u202e" not in out and ESC not in out
