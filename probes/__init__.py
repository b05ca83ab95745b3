"""The probe that runs inside each environment (its entry point is grpo_smoke.py; it never imports envmatrix).

It is several modules: whatever ships the probe into an environment (an image, a cache key) takes
all of `source_files()`, not only the entry point.
"""

from __future__ import annotations

from pathlib import Path


def source_files() -> list[Path]:
    """Every module of the probe, in a stable order (copy them together; hash them together)."""
    return sorted(Path(__file__).resolve().parent.glob("*.py"))
