"""The first transformers release that knows a model_type: read from wheels, found by binary search."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from envmatrix.facts.archsupport import MAPPING_FILES, FirstRelease, mapping_names, search, stable, wheel_names

VERSIONS = [f"4.{minor}.0" for minor in range(30, 58)]


@pytest.mark.parametrize("first", ["4.30.0", "4.45.0", "4.57.0"])
def test_binary_search_finds_the_first_release_and_the_one_before(first: str) -> None:
    asked: list[str] = []

    def knows(v: str) -> bool:
        asked.append(v)
        return VERSIONS.index(v) >= VERSIONS.index(first)

    found = search("x", VERSIONS, knows)
    assert (found.first, found.before) == (first, None if first == VERSIONS[0] else VERSIONS[VERSIONS.index(first) - 1])
    assert found.read == len(asked) <= 7  # log2(28) + the newest


def test_no_release_knows_it() -> None:
    assert search("x", VERSIONS, lambda v: False) == FirstRelease("x", None, "4.57.0", 1)


def test_stable_orders_and_drops_prereleases() -> None:
    assert stable(["5.0.0", "4.10.0", "4.9.1", "5.0.0rc1", "4.57.0.dev0", "junk"]) == ["4.9.1", "4.10.0", "5.0.0"]


def test_both_mapping_layouts_are_read(tmp_path: Path) -> None:
    old = '    [\n        ("qwen3", "Qwen3Config"),\n        ("llama", "LlamaConfig"),\n    ]\n'
    new = 'CONFIG_MAPPING_NAMES.update({\n    "mimi_decoder": "MimiDecoderConfig",\n})\n'
    assert mapping_names(old) == {"qwen3", "llama"} and mapping_names(new) == {"mimi_decoder"}
    wheel = tmp_path / "transformers-9.0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(MAPPING_FILES[0], new)
        zf.writestr(MAPPING_FILES[1], old)
    assert wheel_names(wheel) == {"qwen3", "llama", "mimi_decoder"}
    bare = tmp_path / "transformers-2.0.0-py3-none-any.whl"
    with zipfile.ZipFile(bare, "w") as zf:
        zf.writestr("transformers/__init__.py", "")
    assert wheel_names(bare) == set()
