"""Image+text prompts for the Qwen2-VL-style families, made in code (no image library): a synthetic image
per prompt as the patch rows the vision tower reads, its (t, h, w) grid, and the placeholder tokens.

Images differ in size across the batch, so left padding, image token counts and the multimodal rotary
positions all vary per row; that is where VLM kernels and position code go wrong.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

#: (t, h, w) in patches per prompt: 4, 2, 6 and 1 image tokens after the 2x2 spatial merge.
GRIDS = ((1, 4, 4), (1, 2, 4), (1, 4, 6), (1, 2, 2))


def patch_features(vision_config: Any) -> int:
    """Values per patch row: channels * temporal_patch * patch * patch."""
    channels = getattr(vision_config, "in_channels", None) or getattr(vision_config, "in_chans", 3)
    return int(channels * vision_config.temporal_patch_size * vision_config.patch_size**2)


def image_tokens(grid: tuple[int, int, int], merge: int) -> int:
    t, h, w = grid
    return t * h * w // (merge * merge)


def synthetic_images(n: int, vision_config: Any, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(pixel_values, image_grid_thw) for n images of the GRIDS sizes, deterministic in `seed`."""
    gen = torch.Generator().manual_seed(seed)
    grids = [GRIDS[i % len(GRIDS)] for i in range(n)]
    width = patch_features(vision_config)
    rows = [torch.rand(t * h * w, width, generator=gen) * 2 - 1 for t, h, w in grids]
    return torch.cat(rows), torch.tensor(grids, dtype=torch.long)


def image_prompts(texts: list[str], merge: int, start: str, pad: str, end: str) -> list[str]:
    """Each text preceded by its image: start, one pad token per merged patch, end."""
    return [start + pad * image_tokens(GRIDS[i % len(GRIDS)], merge) + end + text for i, text in enumerate(texts)]


def token_types(model: Any, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """`mm_token_type_ids` (0 text, 1 image) where the model takes them, as processors return them: from
    transformers 5.x Qwen2-VL refuses images without them, and Qwen2.5-VL falls back to text positions."""
    base = getattr(model, "module", model)  # DDP
    base = base.get_base_model() if hasattr(base, "get_base_model") else base  # peft
    if "mm_token_type_ids" not in inspect.signature(base.forward).parameters:
        return {}
    return {"mm_token_type_ids": (input_ids == base.config.image_token_id).int()}


def image_batch(tokenizer: Any, texts: list[str], model: Any, seed: int) -> dict[str, torch.Tensor]:
    """A left-padded batch of image+text prompts with pixel_values, image_grid_thw (and token types)."""
    vision = model.config.vision_config
    start, end, pad = "<|vision_start|>", "<|vision_end|>", "<|image_pad|>"
    batch = dict(tokenizer(image_prompts(texts, vision.spatial_merge_size, start, pad, end), return_tensors="pt", padding=True))
    batch["pixel_values"], batch["image_grid_thw"] = synthetic_images(len(texts), vision, seed)
    batch.update(token_types(model, batch["input_ids"]))
    return batch


def repeat_images(pixel_values: torch.Tensor, grid_thw: torch.Tensor, times: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each image's patch rows repeated `times` in a row, as sequences are (repeat_interleave per prompt)."""
    sizes = grid_thw.prod(-1).tolist()
    blocks = torch.split(pixel_values, sizes)
    return torch.cat([b for b in blocks for _ in range(times)]), grid_thw.repeat_interleave(times, 0)
