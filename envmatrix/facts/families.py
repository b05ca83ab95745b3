"""Built-in probe model families → the transformers release that introduced each family's model class.

Data only, with sources. The probe (probes/families.py) carries the same versions to name them in its
error when a family is missing (it cannot import envmatrix); tests/unit/test_probe_contract.py keeps the
two equal. The catalog reads this to mark cells skipped where an environment's transformers predates a family.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FamilyFact:
    """A model family the probe builds, its transformers class, and the first release that has it."""

    name: str
    model_class: str
    min_transformers: str
    source: str


_NOTES = "https://github.com/huggingface/transformers/releases/tag/v"

FAMILIES: dict[str, FamilyFact] = {
    f.name: f
    for f in (
        FamilyFact("qwen2", "Qwen2ForCausalLM", "4.37.0", _NOTES + "4.37.0 (release notes: Qwen2 added)"),
        FamilyFact("llama", "LlamaForCausalLM", "4.28.0", _NOTES + "4.28.0 (release notes: LLaMA added)"),
        FamilyFact("gemma2", "Gemma2ForCausalLM", "4.42.0", _NOTES + "4.42.0 (release notes: Gemma-2 added)"),
        FamilyFact("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration", "4.49.0", _NOTES + "4.49.0 (release notes: Qwen2.5-VL added)"),
        FamilyFact("qwen2_vl", "Qwen2VLForConditionalGeneration", "4.45.0", _NOTES + "4.45.0 (release notes: Qwen2-VL added)"),
    )
}
NAMES: tuple[str, ...] = tuple(FAMILIES)


def missing_reason(family: str, transformers_version: str) -> str | None:
    """Why `family` cannot run under `transformers_version` (a skip reason), or None when it can."""
    from packaging.version import Version

    fact = FAMILIES[family]
    if Version(transformers_version) < Version(fact.min_transformers):
        return f"model family {family} needs transformers >= {fact.min_transformers} ({fact.model_class}); this environment has {transformers_version}"
    return None
