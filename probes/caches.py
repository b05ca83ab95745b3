"""THE owner of where a cell's and an environment's caches live, and of the variables that say so.

Every library a cell loads keeps a cache or a config somewhere, by default in the user's home or in a
machine-wide /tmp folder: the Hugging Face hub and its remote-code modules (`~/.cache/huggingface`, where
accelerate also reads a default config), vLLM (`~/.cache/vllm`, `~/.config/vllm`), torch's inductor
(`/tmp/torchinductor_<user>`), Triton (`~/.triton`), compiled extensions (DeepSpeed's ops, torch's
cpp_extension: `~/.cache/torch_extensions`), torch hub, CUDA's JIT cache (`~/.nv`), pip, and Python's own
user site (`~/.local`, read at start-up). What a cell sees would then depend on what ran on the machine
before. So every one of them is pointed into a folder the caller owns (the environment's, or the cell's),
and this must happen before the first import of any of those libraries: most read their variable once,
at import. The probe, the fork helper and every backend take the variables from here.

Standard library only: it runs inside the environment under test, and envmatrix imports it too.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, MutableMapping
from pathlib import Path

#: Folder variables, each with its folder under a cache root (relative). HOME comes first: whatever still
#: writes to `~` (a library this list does not know) writes into the root, not into the user's home.
FOLDERS: dict[str, str] = {
    "HOME": "home",
    "XDG_CACHE_HOME": "xdg/cache",
    "XDG_CONFIG_HOME": "xdg/config",
    "XDG_DATA_HOME": "xdg/data",
    "XDG_STATE_HOME": "xdg/state",
    "HF_HOME": "huggingface",  # hub, datasets, remote-code modules (HF_MODULES_CACHE), accelerate's config
    "VLLM_CACHE_ROOT": "vllm/cache",  # its torch.compile cache, assets
    "VLLM_CONFIG_ROOT": "vllm/config",
    "TORCHINDUCTOR_CACHE_DIR": "torch/inductor",
    "TORCH_HOME": "torch/hub",
    "TORCH_EXTENSIONS_DIR": "torch/extensions",  # DeepSpeed's JIT ops, torch.utils.cpp_extension
    "TRITON_HOME": "triton",
    "TRITON_CACHE_DIR": "triton/cache",
    "CUDA_CACHE_PATH": "nv/ComputeCache",
    "MPLCONFIGDIR": "matplotlib",
    "NUMBA_CACHE_DIR": "numba",
    "PIP_CACHE_DIR": "pip",
}
#: Fixed settings: never read the user's site-packages in ~/.local; no usage reports written or sent.
FIXED: dict[str, str] = {
    "PYTHONNOUSERSITE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "VLLM_DO_NOT_TRACK": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
}
#: What is always the cell's own, never the environment's: the hub folder, where remote code from a user's
#: model folder is copied (`--trust-remote-code`), so one cell's code is never another cell's.
CELL_OWN = ("HF_HOME",)
#: A cell's own hub folder, under its output folder.
CELL_HF = ".hf"
#: A folder of compiled ops shared by environments of the same torch, deepspeed, Python and compiler (the caller
#: names it by their hash): the first cell that needs an op builds it under a lock, the others load it
#: (probes/engines.py). Unset: each environment compiles into its own TORCH_EXTENSIONS_DIR.
SHARED_OPS = "ENVMATRIX_SHARED_OPS"


def variables(root: str | os.PathLike[str], *, home: str | None = None) -> dict[str, str]:
    """Every cache variable pointed under `root` (a path as the process that reads it sees it: a host
    folder, or one inside a container), and the fixed settings. `home`: HOME itself elsewhere (a
    container's own tmpfs home)."""
    base = Path(root)
    out = {name: str(base / sub) for name, sub in FOLDERS.items()}
    if home is not None:
        out["HOME"] = home
    return {**out, **FIXED}


def cell_variables(out: str | os.PathLike[str]) -> dict[str, str]:
    """What is the cell's own whatever its environment says (CELL_OWN), under its output folder `out`."""
    return {"HF_HOME": str(Path(out) / CELL_HF)}


def apply(values: Mapping[str, str], environ: MutableMapping[str, str] | None = None, *, keep: bool = True) -> dict[str, str]:
    """Set `values` in `environ` (os.environ) before any library import; with `keep`, a variable the caller
    already set (a backend's, for the environment) stays. Creates HOME, which some tools expect to exist.
    Returns what it set."""
    env = os.environ if environ is None else environ
    done = {k: v for k, v in values.items() if not (keep and k in env)}
    env.update(done)
    home = env.get("HOME")
    if home and "HOME" in done:
        Path(home).mkdir(parents=True, exist_ok=True)
    return done


def owned(environ: Mapping[str, str]) -> dict[str, str]:
    """The cache variables (and fixed settings) of an environment mapping: what a record or a test shows."""
    return {k: environ[k] for k in (*FOLDERS, *FIXED) if k in environ}


def shared_ops(root: str | os.PathLike[str], facts: Mapping[str, str]) -> dict[str, str]:
    """SHARED_OPS for an environment: a folder under `root` named by the hash of what its compiled ops depend
    on (torch's build, deepspeed, Python, the compiler, the machine), so only identical ones share it."""
    key = hashlib.sha256(json.dumps(dict(facts), sort_keys=True).encode()).hexdigest()[:16]
    return {SHARED_OPS: str(Path(root) / key)}
