#!/usr/bin/env python3
"""The fixed GRPO smoke-training probe: a tiny, deterministic GRPO run that exercises a stack the way RL
fine-tuning does, and writes what it measured. It decides no verdict (envmatrix's classifier does).

Imports only the standard library, torch, transformers and tokenizers (peft for LoRA): it runs INSIDE
the environment under test. Contract: command line in; `result.json`, `metrics.jsonl` and a progress line
per step out; exit 0 when it finished whatever it measured, 1 on a crash, 130 on Ctrl-C, 2 on bad options
(or a --model that is neither a family nor a checkpoint folder), 3 for a family this transformers lacks.

    python probes/grpo_smoke.py --out DIR [options]
    torchrun --nproc-per-node 2 probes/grpo_smoke.py --out DIR [options]      # DDP (gloo on CPU)
    torchrun --nproc-per-node 2 probes/grpo_smoke.py --out DIR --parallel fsdp2   # or zero2, zero3

Importing this module does nothing but define functions: `main(argv)` runs the probe and may be called
again in the same process; `preload()` pays the heavy imports once (for a process that forks a child
per cell) without initialising CUDA.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

if __name__ == "__main__" and not __package__:  # run as a script: make the `probes` package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from probes import caches
from probes.record import ProbeInputError, Run
from probes.untrusted import Refused, printable


def build_parser() -> argparse.ArgumentParser:
    """Options mirror matrix.yaml's scenario fields (spec.Scenario.probe_args writes them; a test proves they agree)."""
    p = argparse.ArgumentParser(prog="grpo_smoke.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for result.json and metrics.jsonl")
    p.add_argument("--model", default="qwen2", help="a built-in tiny family (qwen2, llama, gemma2, qwen2_5_vl, qwen2_vl) or a local checkpoint folder")
    p.add_argument("--device", default="auto", help="auto (cuda when available), cpu or cuda")
    p.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32")
    p.add_argument("--attn", default="sdpa", help="attention implementation (eager, sdpa, flash_attention_2, ...)")
    p.add_argument("--grad-ckpt", choices=("off", "reentrant", "non_reentrant"), default="off")
    p.add_argument("--lora", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--freeze-embeddings", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument(
        "--input-grad-hook",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the input-requires-grad hook the libraries add (--no-input-grad-hook removes it: a control)",
    )
    p.add_argument("--num-generations", type=int, default=4)
    p.add_argument("--std", choices=("biased", "unbiased"), default="unbiased", help="group std for advantages (TRL: unbiased)")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=0, help="0 disables top-k")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--beta", type=float, default=0.0, help="KL coefficient to a frozen reference (0: no reference)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--find-unused-parameters", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument("--static-graph", action=argparse.BooleanOptionalAction, default=False)
    p.add_argument(
        "--saved-gen-config",
        choices=("none", "kwargs", "config"),
        default="none",
        help="save the model with a near-greedy generation_config.json, then sample with the scenario's settings as generate kwargs or a GenerationConfig",
    )
    p.add_argument(
        "--kernels", choices=("off", "auto", "reduced", "full"), default="off", help="real-size GEMM and attention stage (auto: full on GPU, reduced on CPU)"
    )
    p.add_argument(
        "--fault",
        choices=("none", "broken_attention", "no_softcap", "sigfpe", "drift"),
        default="none",
        help="inject a known failure (controls); drift: a changed default epsilon, which the fingerprint must show",
    )
    p.add_argument("--trainer", choices=("builtin", "trl"), default="builtin", help="the probe's own GRPO loop, or TRL's GRPOTrainer (trl_trainer.py)")
    p.add_argument(
        "--parallel",
        choices=("ddp", "zero2", "zero3", "fsdp2"),
        default="ddp",
        help="the built-in loop's engine on several ranks: DDP, DeepSpeed ZeRO-2/3 (needs deepspeed) or torch FSDP2 (engines.py)",
    )
    p.add_argument("--use-vllm", action=argparse.BooleanOptionalAction, default=False, help="TRL only: generate with vLLM (colocate mode)")
    p.add_argument(
        "--shrink",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="--model is a folder with config.json and tokenizer (no weights): train a tiny random model of its architecture",
    )
    p.add_argument(
        "--trust-remote-code",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="run the Python files a model folder's config.json or tokenizer names (auto_map); never without this",
    )
    p.add_argument("--collective-timeout", type=float, default=60.0, help="seconds before a stuck collective fails")
    return p


def start(args: argparse.Namespace) -> Run:
    """Make the output folder, keep the hub and caches inside it, and write the first result.json."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # Before any library import: every cache inside the cell's folder where the backend named none
    # (probes/caches.py), the hub folder always the cell's own; no hub access at all.
    caches.apply(caches.variables(out / ".cache"))
    caches.apply(caches.cell_variables(out), keep=False)
    os.environ.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
    )
    options = {k: v for k, v in vars(args).items() if k != "out"}
    run = Run(out=out, rank=int(os.environ.get("RANK", "0")), world=int(os.environ.get("WORLD_SIZE", "1")), options=options)
    run.save()
    return run


def preload() -> None:
    """The heavy imports (torch, torch.distributed, transformers, tokenizers, the model modules), without
    touching CUDA: a helper process calls this once, then forks a child per cell that calls main()."""
    import torch
    import torch.distributed  # noqa: F401
    import transformers  # noqa: F401

    from probes import families, train  # noqa: F401

    families.preload_model_classes()


def main(argv: list[str] | None = None) -> int:
    """Run the probe once; returns its exit status (0 finished, 1 crashed, 130 interrupted, 2 bad input, 3 family unavailable)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse already printed what is wrong
        return exc.code if isinstance(exc.code, int) else 2
    run = start(args)
    code = 1
    try:
        preload()
        run.timing("import_s", run.t0)
        from probes import train

        code = train.probe(run, args)
    except (ProbeInputError, Refused) as exc:  # the user's input, not a crash: one clear line, no traceback
        run.result["error"] = {"type": type(exc).__name__, "message": str(exc), "stage": run.result["stage"]}
        print(f"grpo_smoke.py: error: {printable(str(exc))}", file=sys.stderr, flush=True)
        code = getattr(exc, "exit_code", 2)
    except BaseException as exc:  # record the crash, then fail the way it would have
        run.result["error"] = {"type": type(exc).__name__, "message": str(exc)[:4000], "stage": run.result["stage"]}
        run.save()
        print(printable(traceback.format_exc(), keep_newlines=True), end="", file=sys.stderr)  # text from user files can be in it
        sys.stdout.flush()
        code = 130 if isinstance(exc, KeyboardInterrupt) else 1
    finally:
        run.close()
        if "probes.train" in sys.modules:
            sys.modules["probes.train"].end_distributed()
    run.save()
    run.log(f"probe {'finished' if run.result['finished'] else 'did not finish'} in {run.result['timings']['total_s']} s")
    return code


if __name__ == "__main__":
    sys.exit(main())
