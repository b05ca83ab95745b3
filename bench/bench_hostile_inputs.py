"""Hostile model folders through `envmatrix preflight` (tests/hostile/model_cases.py): for each, the exit
status, wall seconds, peak resident memory of the whole process tree (wait4's ru_maxrss, as /usr/bin/time -v
reports it) and the first line of the answer. Figures go to the output, never to assertions.

    python bench/bench_hostile_inputs.py [--case NAME ...] [--where host|probe|all] [--full-size] [--readers | --readers-only]

`--readers`: also the readers' cases of issue 42 (tests/hostile/reader_cases.py: locks, requirements, an
interpreter's answer, matrix files, outputs), each through its real command; `--readers-only`: those alone.
`--full-size`: also time the meta-device build of full-size configs (Llama 3 70B, Qwen3-30B-A3B, DeepSeek-V3)
in this interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "hostile")]

# the cases are the hostile tests' own fixtures (tests/ is not a package mypy checks)
import reader_cases  # type: ignore[import-not-found]  # noqa: E402
from model_cases import CASES, HOST, PROBE  # type: ignore[import-not-found]  # noqa: E402
from user_models import LLAMA3_70B, QWEN3_30B_A3B, user_model  # type: ignore[import-not-found]  # noqa: E402

DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "n_group": 8,
    "topk_group": 4,
    "first_k_dense_replace": 3,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "qk_nope_head_dim": 128,
    "vocab_size": 129280,
    "max_position_embeddings": 163840,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000,
}


TIME = "/usr/bin/time"


def preflight(folder: Path, work: Path) -> tuple[int, float, int, str]:
    """(exit status, seconds, peak RSS KiB of the process tree, the answer's line). Measured by /usr/bin/time,
    a small process between this one and preflight: wait4's ru_maxrss of a child forked from this (large)
    process would count the pages it shared with it."""
    cmd = [sys.executable, "-m", "envmatrix", "preflight", "--file", str(ROOT / "matrix.yaml"), "--profile", "cpu", "--model-config", str(folder)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "300"}
    start = time.monotonic()
    with (work / "out").open("wb") as out, (work / "err").open("wb") as err:
        code = subprocess.run([TIME, "-o", str(work / "rss"), "-f", "%M", *cmd], stdout=out, stderr=err, cwd=work, env=env, check=False).returncode
    seconds = time.monotonic() - start
    rss = (work / "rss").read_text().split()
    said = (work / "err").read_text(errors="replace").strip() or (work / "out").read_text(errors="replace")
    line = next((x for x in said.splitlines() if "error" in x or "verdict" in x), said.splitlines()[0] if said else "")
    return code, seconds, int(rss[-1]) if rss and rss[-1].isdigit() else -1, line


def measured(cmd: list[str], work: Path, env: dict[str, str]) -> tuple[int, float, int, str]:
    """(exit status, seconds, peak RSS KiB of the process tree, the first line it said) of `envmatrix ARGS`."""
    start = time.monotonic()
    with (work / ".out").open("wb") as out, (work / ".err").open("wb") as err:
        code = subprocess.run([TIME, "-o", str(work / ".rss"), "-f", "%M", *cmd], stdout=out, stderr=err, cwd=work, env=env, check=False).returncode
    seconds = time.monotonic() - start
    rss = (work / ".rss").read_text().split()
    said = (work / ".err").read_text(errors="replace").strip() or (work / ".out").read_text(errors="replace").strip()
    return code, seconds, int(rss[-1]) if rss and rss[-1].isdigit() else -1, said.splitlines()[0] if said else ""


def readers(names: list[str]) -> None:
    """Each reader case through its command: exit (and the one it must give), seconds, peak memory, first line."""
    env = {**reader_cases.environment(), "PYTHONPATH": str(ROOT), "COLUMNS": "300"}
    for name, case in reader_cases.CASES.items():
        if names and name not in names:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            args = case.build(Path(tmp))
            code, seconds, peak_kib, line = measured([sys.executable, "-m", "envmatrix", *args], Path(tmp), env)
        flag = "" if code == case.status else f"  (expected {case.status})"
        print(f"{name:48} exit {code}{flag}  {seconds:6.2f} s  {peak_kib / 1024:6.0f} MiB  {line[:160]}", flush=True)


def full_size() -> None:
    """The full-size check (config class, model class, meta-device build) of three large configs, in this process."""
    from probes import fullsize

    for name, config in (("llama3-70b", LLAMA3_70B), ("qwen3-30b-a3b", QWEN3_30B_A3B), ("deepseek-v3", DEEPSEEK_V3)):
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "config.json").write_text(json.dumps(config))
            start = time.perf_counter()
            arch = fullsize.check(config, Path(tmp), trusted=False)
            whole = time.perf_counter() - start
            print(f"full size {name:15} {arch.params / 1e9:8.2f} B parameters: meta build {arch.seconds:6.2f} s, whole check {whole:6.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs="*", default=[])
    parser.add_argument("--where", choices=(HOST, PROBE, "all"), default="all")
    parser.add_argument("--full-size", action="store_true")
    parser.add_argument("--readers", action="store_true", help="also the readers' cases of issue 42")
    parser.add_argument("--readers-only", action="store_true", help="only the readers' cases of issue 42")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    if args.readers or args.readers_only:
        readers(args.case)
        if args.readers_only:
            return
    if args.full_size:
        full_size()
    chosen = [c for c in CASES if (not args.case or c.name in args.case) and args.where in ("all", c.where)]
    with tempfile.TemporaryDirectory() as tmp:
        base = user_model(Path(tmp) / "base", "qwen3-8b")
        for case in chosen:
            work = Path(tmp) / case.name
            folder = work / "model"
            shutil.copytree(base, folder)
            case.damage(folder)
            code, seconds, peak_kib, line = preflight(folder, work)
            print(f"{case.name:32} exit {code}  {seconds:6.1f} s  {peak_kib / 1024:7.0f} MiB  {line[:200]}", flush=True)
            shutil.rmtree(work)


if __name__ == "__main__":
    main()
