"""How the probe's own GRPO loop trains on its ranks: DDP (the default), torch FSDP2, or DeepSpeed ZeRO-2/3.

One engine object hides the choice from the loop: what the training forward runs through, how backward and
the optimizer step go (and the grad norm they report), how generation sees whole weights, and how a
parameter's whole value and gradient are read, so "every trainable parameter got a gradient and changed"
means the same under sharding. Standard library and torch only; deepspeed is imported inside the functions
that need it (it is installed only where a scenario asks for ZeRO).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed

from probes import caches

PARALLEL = ("ddp", "zero2", "zero3", "fsdp2")
ZERO_STAGES = {"zero2": 2, "zero3": 3}
#: the loop's clipping threshold under every engine (DeepSpeed's gradient_clipping)
MAX_GRAD_NORM = 1.0
#: DeepSpeed's name for each autocast dtype the scenario may ask for
AUTOCAST_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def deepspeed_config(stage: int, lr: float, micro_batch: int, dtype: str) -> dict[str, Any]:
    """A minimal ZeRO config. DeepSpeed's bf16/fp16 modes stay off: the loop keeps fp32 master weights and
    computes under torch.autocast, as it does under DDP (bf16 weights would round lr-sized updates of
    unit-scale weights away, and "changed" would lie). The engine switches an outer autocast off inside its
    forward unless its `torch_autocast` section asks for it, so that section carries the scenario's dtype.
    `torch_adam`: torch's AdamW, no compiled DeepSpeed op (DS_BUILD_OPS=0 installs have none)."""
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "optimizer": {"type": "AdamW", "params": {"lr": lr, "weight_decay": 0.0, "torch_adam": True}},
        "gradient_clipping": MAX_GRAD_NORM,
        "bf16": {"enabled": False},
        "fp16": {"enabled": False},
        "steps_per_print": 2**31 - 1,  # the probe prints its own rows
    }
    if dtype in AUTOCAST_DTYPES:
        config["torch_autocast"] = {"enabled": True, "dtype": AUTOCAST_DTYPES[dtype]}
    return config


def shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules FSDP2 shards one by one before the root: those whose class the model names in
    `_no_split_modules` (its decoder layers, a VLM's vision blocks), as transformer-based wrapping does."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if m is not model and type(m).__name__ in names]


def use_deepspeed_on(device_type: str) -> None:
    """DeepSpeed picks its accelerator when imported: on a CPU it must be told (it then talks gloo). Its ops
    compiled at first use come from the shared folder where the backend names one."""
    if device_type == "cpu":
        os.environ["DS_ACCELERATOR"] = "cpu"
    folder = os.environ.get(caches.SHARED_OPS)
    if folder:
        for name in SHARED_OPS:
            shared_op(name, Path(folder))


#: DeepSpeed's ops the engines compile at first use (on CPU: the shared-memory all-reduce, 60-80 s each time).
SHARED_OPS = ("ShareMemCommBuilder",)


def op_digest(builder: Any) -> str:
    """What a compiled op is made of: the bytes of its sources and of the headers in its include folders, and the
    flags it is compiled and linked with. Two deepspeed releases whose op did not change share one build."""
    digest = hashlib.sha256(str(builder.name).encode())
    paths: list[Path] = []
    for source in builder.strip_empty_entries(builder.sources()):
        paths.append(Path(builder.deepspeed_src_path(source)))
    for include in builder.strip_empty_entries(builder.include_paths()):
        found = Path(builder.deepspeed_src_path(include))
        paths += sorted(p for p in found.rglob("*") if p.is_file()) if found.is_dir() else [found]
    for path in paths:
        digest.update(path.name.encode())
        digest.update(path.read_bytes() if path.is_file() else b"-")
    for flags in ("cxx_args", "extra_ldflags"):
        with contextlib.suppress(Exception):  # a builder that cannot say (no compiler found) is keyed without them
            digest.update(repr(getattr(builder, flags)()).encode())
    return digest.hexdigest()[:16]


def shared_op(builder_name: str, folder: Path) -> Any:
    """Load one of DeepSpeed's JIT ops from a folder under `folder` (named by `op_digest`), building it there first
    under a lock if no environment of the same torch, Python, compiler and op did (`folder` is named by the first
    three, chosen by the caller), and hand it to DeepSpeed's op cache, so `builder.load()` returns it without
    compiling. Why by hand: torch's JIT cache is keyed by the absolute paths of the sources and includes, which
    differ between virtualenvs, so two environments with the same torch would compile the same op twice. None where
    DeepSpeed has no such op for this accelerator or it cannot be built here (DeepSpeed then does what it would)."""
    import fcntl
    import importlib.util
    import shutil

    from deepspeed.accelerator import get_accelerator

    builder = get_accelerator().create_op_builder(builder_name)
    if builder is None:
        return None
    owner = next((k for k in type(builder).__mro__ if "_loaded_ops" in vars(k)), None)
    loaded: dict[str, Any] = vars(owner)["_loaded_ops"] if owner is not None else {}
    if owner is None or builder.name in loaded:
        return loaded.get(builder.name)
    try:
        folder = folder / op_digest(builder)
    except (OSError, AttributeError, TypeError):  # a builder of another shape: no sharing, DeepSpeed builds its own
        return None
    folder.mkdir(parents=True, exist_ok=True)
    library = folder / f"{builder.name}.so"
    with (folder / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not library.exists():
            if not builder.is_compatible(False):
                return None
            build = folder / f".build-{os.getpid()}"
            before = os.environ.get("TORCH_EXTENSIONS_DIR")
            os.environ["TORCH_EXTENSIONS_DIR"] = str(build)
            try:
                built = builder.jit_load(verbose=False)
            finally:
                if before is None:
                    os.environ.pop("TORCH_EXTENSIONS_DIR", None)
                else:
                    os.environ["TORCH_EXTENSIONS_DIR"] = before
            shutil.copy(built.__file__, library.with_suffix(".part"))
            library.with_suffix(".part").replace(library)
            shutil.rmtree(build, ignore_errors=True)
            return built
    spec = importlib.util.spec_from_file_location(builder.name, library)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    loaded[builder.name] = module
    return module


@contextlib.contextmanager
def gathered(params: list[torch.Tensor], stage: int) -> Iterator[None]:
    """ZeRO-3's partitioned parameters whole on every rank inside the block (a collective: every rank enters);
    nothing to gather below stage 3."""
    if stage != 3:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(params):
        yield


def dtensor_count(params: list[torch.Tensor]) -> int:
    """Parameters FSDP2 sharded (DTensors)."""
    from torch.distributed.tensor import DTensor

    return sum(isinstance(p, DTensor) for p in params)


def partitioned_count(params: list[torch.Tensor]) -> int:
    """Parameters DeepSpeed ZeRO-3 partitioned (they carry its ds_id)."""
    return sum(hasattr(p, "ds_id") for p in params)


class Engine:
    """DDP (or one plain process): torch's optimizer, clip_grad_norm_, parameters whole on every rank."""

    parallel = "ddp"

    def __init__(self, model: Any, train_model: Any, optimizer: torch.optim.Optimizer | None) -> None:
        self.model = model
        self.train_model = train_model
        self.optimizer = optimizer

    def zero_grad(self) -> None:
        assert self.optimizer is not None
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self, params: list[torch.Tensor]) -> float:
        """Clip to MAX_GRAD_NORM and step; the grad norm before clipping."""
        assert self.optimizer is not None
        norm = torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        self.optimizer.step()
        return float(norm.item())

    @contextlib.contextmanager
    def generating(self) -> Iterator[None]:
        """Whole weights for generate() (nothing to do when every rank holds them)."""
        yield

    def whole(self, params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each parameter's whole value, detached and copied (a collective under sharding: every rank calls it)."""
        return {n: p.detach().clone() for n, p in params.items()}

    def whole_grads(self, params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor | None]:
        """Each parameter's whole gradient after backward, before the step (a collective under sharding)."""
        return {n: p.grad for n, p in params.items()}

    def facts(self) -> dict[str, Any]:
        return {"parallel": self.parallel, "sharded": False}


class Fsdp2(Engine):
    """torch FSDP2: parameters are DTensors sharded across the mesh; whole values through full_tensor()."""

    parallel = "fsdp2"

    def step(self, params: list[torch.Tensor]) -> float:
        assert self.optimizer is not None
        norm = torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # a DTensor norm is Partial
        self.optimizer.step()
        return float(norm.item())

    def whole(self, params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {n: _full(p.detach()).clone() for n, p in params.items()}

    def whole_grads(self, params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor | None]:
        return {n: None if p.grad is None else _full(p.grad) for n, p in params.items()}

    def facts(self) -> dict[str, Any]:
        params = list(self.model.parameters())
        dtensors = dtensor_count(params)
        return {"parallel": self.parallel, "sharded": dtensors == len(params) > 0, "dtensor_params": dtensors, "params": len(params)}


def _full(t: torch.Tensor) -> torch.Tensor:
    full = getattr(t, "full_tensor", None)
    return full() if full is not None else t


class Zero(Engine):
    """DeepSpeed ZeRO-2/3: the engine runs forward, backward and the step (its own clipping and AdamW)."""

    def __init__(self, model: Any, engine: Any, stage: int) -> None:
        super().__init__(model, engine, None)
        self.stage = stage
        self.parallel = f"zero{stage}"

    def zero_grad(self) -> None:
        pass  # the engine zeroes its gradients after every step

    def backward(self, loss: torch.Tensor) -> None:
        self.train_model.backward(loss)

    def step(self, params: list[torch.Tensor]) -> float:
        self.train_model.step()
        norm = self.train_model.get_global_grad_norm()
        return float(norm.item() if isinstance(norm, torch.Tensor) else norm)

    @contextlib.contextmanager
    def generating(self) -> Iterator[None]:
        """As TRL's unwrap_model_for_generation: under ZeRO-3 gather every parameter and take the engine's
        hooks off for generate(), then put them back with the coordinator's trace invalidated."""
        if self.stage != 3:
            yield
            return
        with gathered(list(self.train_model.parameters()), self.stage):
            _remove_zero3_hooks(self.train_model)
            try:
                yield
            finally:
                _add_zero3_hooks(self.train_model)

    def whole(self, params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with gathered(list(params.values()), self.stage):
            return super().whole(params)

    def whole_grads(self, params: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor | None]:
        from deepspeed.utils import safe_get_full_grad

        return {n: safe_get_full_grad(p) for n, p in params.items()}

    def facts(self) -> dict[str, Any]:
        import deepspeed

        params = list(self.model.parameters())
        return {
            "parallel": self.parallel,
            "sharded": True,
            "params": len(params),
            "zero_stage": self.train_model.zero_optimization_stage(),
            "partitioned_params": partitioned_count(params),
            "deepspeed": deepspeed.__version__,
        }


def _zero3_offload(engine: Any) -> Any | None:
    """The object holding a ZeRO-3 engine's module hooks (None before the optimizer exists), as TRL finds it."""
    optimizer = getattr(engine, "optimizer", None)
    return None if optimizer is None else getattr(optimizer, "parameter_offload", optimizer)


def _remove_zero3_hooks(engine: Any) -> None:
    offload = _zero3_offload(engine)
    if offload is None:
        return
    for param in offload.module.parameters(recurse=True):
        param.ds_active_sub_modules.clear()
    for hook in [*offload.forward_hooks, *offload.backward_hooks]:
        hook.remove()
    offload.forward_hooks, offload.backward_hooks = [], []


def _add_zero3_hooks(engine: Any) -> None:
    offload = _zero3_offload(engine)
    if offload is None:
        return
    coordinator = getattr(offload, "param_coordinator", None)
    if coordinator is not None and not coordinator.is_invalid_trace():
        coordinator._invalidate_trace()
    register = getattr(offload, "_register_deepspeed_module", None) or offload._register_hooks_recursively  # renamed in 0.16.4
    register(offload.module)


def make(
    parallel: str, model: Any, trainable: dict[str, torch.Tensor], *, lr: float, dtype: str, micro_batch: int, device: torch.device, ddp: dict[str, bool]
) -> tuple[Engine, dict[str, torch.Tensor]]:
    """Wrap `model` for `parallel` on the current process group; the engine and the trainable parameters as
    the engine holds them (FSDP2 replaces every parameter with a sharded one)."""
    world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
    if parallel == "ddp":
        train_model = (
            torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=ddp["find_unused_parameters"], static_graph=ddp["static_graph"])
            if world > 1
            else model
        )
        optimizer = torch.optim.AdamW(list(trainable.values()), lr=lr, weight_decay=0.0)  # no decay: "changed" means learned
        return Engine(model, train_model, optimizer), trainable
    if parallel == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

        mesh = init_device_mesh(device.type, (world,))
        for unit in shard_units(model):
            fully_shard(unit, mesh=mesh)
        fully_shard(model, mesh=mesh)
        if hasattr(model, "generate"):  # generate() through a wrapper (peft) must unshard the root too, as transformers' Trainer does
            register_fsdp_forward_method(model, "generate")
        sharded = {n: p for n, p in model.named_parameters() if p.requires_grad}
        optimizer = torch.optim.AdamW(list(sharded.values()), lr=lr, weight_decay=0.0)
        return Fsdp2(model, model, optimizer), sharded
    if parallel in ZERO_STAGES:
        use_deepspeed_on(device.type)
        import deepspeed

        stage = ZERO_STAGES[parallel]
        engine, *_ = deepspeed.initialize(model=model, model_parameters=list(trainable.values()), config=deepspeed_config(stage, lr, micro_batch, dtype))
        return Zero(model, engine, stage), trainable
    raise ValueError(f"parallel: '{parallel}' is not one of {', '.join(PARALLEL)}")
