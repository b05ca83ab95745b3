"""What several commands do with the shared options: the profile, the GPU type, the selected cells, warnings."""

from __future__ import annotations

import argparse
import sys

from ..errors import InputError, SpecError, printable
from ..host.gpus import HostGpus, default_profile, detect_gpus
from ..plan.cells import Cell
from ..plan.expand import expand
from ..plan.shard import shard
from ..spec.matrix import Spec, check_pattern, load


def warn(message: str) -> None:
    print(f"envmatrix: warning: {printable(message)}", file=sys.stderr)


def profile_name(args: argparse.Namespace, spec: Spec, gpus: HostGpus | None = None) -> str:
    """--profile, `auto` meaning gpu on a GPU host and cpu elsewhere (the GPUs are asked for only then, when
    not given); one the matrix file lacks is bad input."""
    profile = default_profile(gpus if gpus is not None else detect_gpus()) if args.profile == "auto" else str(args.profile)
    if profile not in spec.profiles:
        raise InputError(f"{args.file}: no profile '{profile}'; the file defines: {', '.join(spec.profiles)}")
    return profile


def gpu_type(args: argparse.Namespace, gpus: HostGpus) -> str:
    """--gpu, else this host's matrix GPU type; a host GPU the catalog does not know must be named."""
    gpu = args.gpu or gpus.matrix_name
    if gpu is None:
        raise InputError(f"this host's GPU ({gpus.names[0]}) is not in the catalog; name its matrix GPU type with --gpu")
    return str(gpu)


def gpu_ids(gpu: str, gpus: HostGpus) -> list[int]:
    """The host GPUs a cell of matrix type `gpu` runs on: those of its type; all of them when the host has
    none of that name (--gpu named the type of a GPU the catalog does not know); none for cpu."""
    if gpu == "cpu":
        return []
    return gpus.types().get(gpu, [g.index for g in gpus.devices])


def gpu_types(args: argparse.Namespace, gpus: HostGpus) -> dict[str, list[int]]:
    """The GPU types a run covers here, each with the GPUs its cells get: every type the host has, each on
    its own GPUs (a mixed host runs A100 cells on its A100s, H20 cells on its H20s); --gpu one type."""
    types = gpus.types()
    if args.gpu or not types:
        gpu = gpu_type(args, gpus)
        return {gpu: gpu_ids(gpu, gpus)}
    return types


def take_shard(cells: list[Cell], which: tuple[int, int] | None) -> list[Cell]:
    """The cells of shard I of N (all cells when no shard was asked for)."""
    if which is None:
        return cells
    return shard(cells, which[1])[which[0] - 1]


def select_cells(args: argparse.Namespace, *, gpu: str | None, host: HostGpus | None = None) -> tuple[Spec, str, list[Cell]]:
    """Load the matrix, resolve the profile and expand it with the command line's selection; a selection
    that matches no cell is bad input (exit 2) for plan and run alike."""
    bad = [f"--{flag} {problem}" for flag in ("only", "skip") for p in getattr(args, flag) if (problem := check_pattern(p))]
    if bad:
        raise SpecError(bad)
    spec = load(args.file)
    profile = profile_name(args, spec)
    have = spec.profiles[profile].axes["gpu"]
    if gpu is not None and gpu not in have:
        raise InputError(f"--gpu {gpu}: profile '{profile}' has no such GPU; it has {', '.join(have)}")
    cells = expand(spec, profile, only=args.only, skip=args.skip, gpu=gpu, host=host)
    if not cells:
        given = [f"--{flag} {p}" for flag in ("only", "skip") for p in getattr(args, flag)] + ([f"--gpu {gpu}"] if gpu else [])
        prof = spec.profiles[profile]
        given += [f"{key}: in {args.file}" for key in ("select", "skip") if getattr(prof, key)]
        raise InputError(f"profile '{profile}': the selection ({', '.join(given)}) matches no cell; list the ids with envmatrix plan --profile {profile}")
    return spec, profile, cells
