"""`envmatrix init`: a profile of matrix.yaml from what a team already has (a requirements file, a lock, or an
interpreter), its versions as each axis's baseline, for `envmatrix watch`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.markup import escape

from ..errors import InputError
from ..host.gpus import detect_gpus
from ..outputs.terminal import Console
from ..outputs.writer import file_target, write_file
from ..spec.matrix import check_profile_name
from . import options


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("init", help="write a profile from your requirements.txt, pylock.toml, uv.lock or interpreter: your versions as the baseline")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--from", dest="source", metavar="FILE", help="a requirements file, a PEP 751 pylock.toml or a uv.lock")
    source.add_argument(
        "--current",
        nargs="?",
        const="",
        metavar="PYTHON",
        help="the distributions installed in this interpreter, or in the interpreter PYTHON (e.g. a venv's bin/python)",
    )
    options.FILE.add(p, note="./matrix.yaml; created, or the profile is added to it and the rest kept")
    options.PROFILE.add(p, default="stack", note="stack; an existing profile of that name is replaced")
    options.GPU.add(p, note="this host's: cpu without a GPU")
    p.add_argument("--model-config", metavar="DIR", type=Path, help="your model's folder (config.json and tokenizer, no weights): a scenario of it, shrunk")
    p.add_argument("--grpo-config", metavar="FILE", type=Path, help="with --model-config: your TRL GRPOConfig (YAML or JSON), applied to that scenario")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """Read the stack, draft the profile, validate and write it, say what was written."""
    from ..answers import init
    from ..stack import read_stack
    from ..stack.interpreter import read_interpreter

    bad_name = check_profile_name(args.profile)
    if bad_name:
        raise InputError(f"--profile: {bad_name}; nothing was written")
    file_target(Path(args.file), "--file")  # a folder, FIFO or device is refused before anything is read
    stack = read_stack(Path(args.source)) if args.source is not None else read_interpreter(args.current or None)
    gpu, gpu_source = args.gpu, "--gpu"
    if gpu is None:
        gpus = detect_gpus()
        if gpus.matrix_name is None:
            raise InputError(f"this host's GPU ({gpus.names[0]}) is not in the catalog; name its matrix GPU type with --gpu")
        gpu, gpu_source = gpus.matrix_name, (f"this host's GPU ({gpus.names[0]}, nvidia-smi)" if gpus.names else "this host has no GPU (nvidia-smi lists none)")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    python, python_source = stack.python if stack.python else (here, f"{stack.source} names no Python: this interpreter's ({sys.executable})")
    target = Path(args.file)
    where = init.Where(gpu, gpu_source, python, python_source)
    draft = init.draft(stack, name=args.profile, where=where, target=target, model_config=args.model_config, grpo_config=args.grpo_config)
    existed = target.exists()
    text, spec = init.prepare(target, draft)
    console = Console()
    console.print(f"{'updated' if existed else 'wrote'} {escape(str(target))}: profile [bold]{escape(args.profile)}[/] from {escape(stack.source)}")
    for axis, value in [*draft.axes.items(), *draft.packages.items()]:
        console.print(f"  {axis}: {', '.join(value.values)}  [dim]{escape(value.source)}[/]")
    console.print(f"  scenarios: {', '.join(n for n, _ in draft.scenarios)}")
    for note in draft.notes:
        console.print(f"  note: {escape(note)}")
    sys.stdout.flush()  # the answer is out before the file is written: a failed write loses only the file
    write_file(target, text, "--file")
    reasons = init.unplannable(spec, args.profile)
    if reasons:
        err = Console(stderr=True)
        err.print(f"[yellow]warning[/]: no cell of profile {escape(args.profile)} can run as written:")
        for reason in reasons[:8]:
            err.print(f"  {escape(reason)}")
        err.print(escape("  edit the axis the reasons name (flash_attn: [none], a wheelhouse, another --gpu) before envmatrix watch"))
        return 0
    console.print(f"next: envmatrix watch --file {escape(str(target))} --profile {escape(args.profile)}")
    return 0
