"""Hostile matrix files, fixed and generated: each ends with exit 2, a message naming the file and
line, and no traceback, within bounds.

Bounds (bounded.py): every `envmatrix plan` child runs under RLIMIT_AS = 1 GiB, is killed after 30 s,
and must peak under 256 MiB resident; each case here takes about a second and 30 MiB. Before the
bounded loader a 468-byte alias bomb ran past 60 s and 2.9 GB, and recursion ended in RecursionError.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml
from bounded import assert_clean_failure, run_bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envmatrix.errors import EnvmatrixError
from envmatrix.spec.matrix import load


def alias_bomb(levels: int, items: int) -> str:
    """`a0: &a0 [x × items]`, then each level a list of `items` aliases of the one before: items**levels values."""
    lines = [f"a0: &a0 [{', '.join(['x'] * items)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * items)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


MINI = """version: 1
profiles:
  cpu:
    cuda: [none]
    torch: [2.13.0]
    transformers: [4.57.6]
    flash_attn: [none]
    gpu: [cpu]
    python: ['3.11']
scenarios:
  fp32-sdpa: {dtype: fp32, steps: 2}
"""


def base_text() -> str:
    return MINI


FIXED = {
    "alias-bomb": (alias_bomb(9, 9), "expands to more than"),
    "alias-bomb-in-mapping": (
        "k0: &k0 {a: 1, b: 2, c: 3, d: 4}\n" + "".join(f"k{i}: &k{i} {{a: *k{i - 1}, b: *k{i - 1}, c: *k{i - 1}, d: *k{i - 1}}}\n" for i in range(1, 12)),
        "expands to more than",
    ),
    "recursive-alias": ("a: &a [*a]\n", "recursive alias"),
    "recursive-merge": ("a: &a {<<: *a}\n", "recursive alias"),
    "deep-flow-lists": ("profiles: " + "[" * 20000 + "]" * 20000 + "\n", "nested more than"),
    "deep-flow-maps": ("profiles: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", "nested more than"),
    "deep-block-lists": ("".join("  " * i + "-\n" for i in range(400)), "nested more than"),
    "deep-by-aliases": ("a0: &a0 " + "[" * 12 + "x" + "]" * 12 + "\n" + "".join(f"a{i}: &a{i} {'[' * 12}*a{i - 1}{']' * 12}\n" for i in range(1, 20)), "deep"),
    "huge-integer": ("version: " + "9" * 5000 + "\n", "a number of 5,000 characters"),
    "huge-integer-in-field": (base_text().replace("steps: 2", "steps: " + "1" * 4000, 1), "a number of 4,000 characters"),
    "float-overflow": (base_text().replace("steps: 2", "steps: 2, temperature: 1e999", 1), "out of range"),
    "bad-timestamp": ("version: 2001-13-45\n", "cannot read this value"),
    "undefined-alias": ("version: *nope\n", "undefined alias"),
    "merge-of-a-number": ("version: 1\nprofiles: {<<: 5}\nscenarios: {a: {}}\n", "merge key"),
    "include-a-number": (base_text().replace("  cpu:\n", "  cpu:\n    include: 5\n", 1), "include: must be a list"),
    "exclude-true": (base_text().replace("  cpu:\n", "  cpu:\n    exclude: true\n", 1), "exclude: must be a list"),
    "trailing-newline-version": (base_text().replace("torch: [2.13.0]", 'torch: ["2.13.0\\n"]', 1), "'2.13.0\\n' is not a version"),
    "list-as-key": ("? [a, b]\n: 1\n", "a key must be a plain name"),
    "brace-bomb-select": (base_text().replace("  cpu:\n", "  cpu:\n    select: ['" + "{a,b}" * 30 + "']\n", 1), "expand to more than"),
    "thousands-of-skips": (base_text().replace("  cpu:\n", "  cpu:\n    skip: [" + ", ".join(f"'x{i}*'" for i in range(5000)) + "]\n", 1), "more than 1000"),
    "axis-product-bomb": (
        "version: 1\nprofiles:\n  p: {cuda: [none], gpu: [cpu], python: ['3.11'], flash_attn: [none],\n"
        + f"      torch: [{', '.join(f'2.{i}.0' for i in range(400))}], transformers: [{', '.join(f'4.{i}.0' for i in range(400))}]}}\n"
        + "scenarios: {a: {}}\n",
        "cells (axes × scenarios), more than",
    ),
    "not-utf8": ("version: \udcff\n", "cannot read a matrix file"),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_fixed_hostile_file(tmp_path: Path, name: str) -> None:
    text, says = FIXED[name]
    assert text, f"{name}: the base matrix changed; update the case"
    path = tmp_path / "matrix.yaml"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    ended = run_bounded(["plan", "--profile", "cpu", "--file", str(path)])
    assert_clean_failure(ended, says=says)
    assert str(path) in ended.stderr


def test_terminal_escapes_are_not_echoed(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(base_text().replace("gpu: [cpu]", 'gpu: ["\\e[2J\\e]0;pwned\\a\\u202eA100"]', 1))
    ended = run_bounded(["plan", "--profile", "cpu", "--file", str(path)])
    assert_clean_failure(ended, says="\\x1b[2J\\x1b]0;pwned\\x07\\u202eA100")
    assert "\x1b" not in ended.stderr and "\u202e" not in ended.stderr and "\x07" not in ended.stderr


def test_merge_keys_work(tmp_path: Path) -> None:
    """`<<: *defaults` is ordinary YAML: it merges (explicit keys win), it is not a 'syntax error'."""
    path = tmp_path / "matrix.yaml"
    path.write_text(
        "version: 1\nx-defaults: &d {dtype: fp32, steps: 3}\nprofiles:\n"
        "  cpu: {cuda: [none], torch: [2.13.0], transformers: [4.57.6], flash_attn: [none], gpu: [cpu], python: ['3.11']}\n"
        "scenarios:\n  a: {<<: *d, steps: 2}\n  b: {<<: [*d, {lr: 0.5}]}\n"
    )
    spec = load(path)
    assert (spec.scenarios["a"].dtype, spec.scenarios["a"].steps) == ("fp32", 2)
    assert (spec.scenarios["b"].steps, spec.scenarios["b"].lr) == (3, 0.5)


# ---- generated documents: random nesting and random aliases ---------------------------------------


def random_document(rng: random.Random, anchors: int, depth: int, fanout: int) -> str:
    """Flow-style YAML where each anchored value nests up to `depth` levels of lists and mappings
    around aliases of earlier anchors: sizes from tiny to astronomically large once expanded. The text
    itself stays under about 600 values (PyYAML reads some 100 KiB/s)."""
    written = [0]

    def value(level: int, earlier: int) -> str:
        roll = rng.random()
        written[0] += 1
        if (level >= depth or roll < 0.2 or written[0] > 600) and level > 0:
            return f"*a{rng.randrange(earlier)}" if earlier and rng.random() < 0.6 else rng.choice(["x", "1", "2.5.1", "'s'", "null", "true", "[]", "{}"])
        items = [value(level + 1, earlier) for _ in range(rng.randint(1, fanout))]
        if roll < 0.6:
            return "[" + ", ".join(items) + "]"
        return "{" + ", ".join(f"k{i}: {v}" for i, v in enumerate(items)) + "}"

    lines = [f"a{i}: &a{i} {value(0, i)}" for i in range(anchors)]
    if rng.random() < 0.3:  # now and then an alias that refers to its own anchor
        lines.append(f"r: &r [{value(1, anchors)}, *r]")
    return "\n".join(lines) + "\n"


GENERATED_DRIVER = """
import json, sys
from pathlib import Path
from envmatrix.errors import EnvmatrixError
from envmatrix.spec.matrix import load
out = {}
for path in sorted(Path(sys.argv[1]).glob("*.yaml")):
    try:
        load(path)
        out[path.name] = "loaded"
    except EnvmatrixError as exc:
        out[path.name] = type(exc).__name__
print(json.dumps(out))
"""


def test_generated_documents_in_one_bounded_child(tmp_path: Path) -> None:
    """40 random documents (seeded: a failure is reproducible) with up to 40 levels and fan-out 12
    through the real loader in one child under the bounds; any non-envmatrix exception is a traceback."""
    rng = random.Random(18)
    for i in range(40):
        (tmp_path / f"doc{i:02}.yaml").write_text(random_document(rng, anchors=rng.randint(1, 12), depth=rng.randint(1, 40), fanout=rng.randint(1, 12)))
    ended = run_bounded(["-c", GENERATED_DRIVER, str(tmp_path)])
    assert not ended.killed_for_time and ended.status == 0, ended.stderr[-3000:]
    assert ended.peak_rss_kib <= 256 * 1024
    outcomes = json.loads(ended.stdout)
    assert len(outcomes) == 40 and set(outcomes.values()) <= {"SpecError", "InputError"}
    assert sum(1 for v in outcomes.values() if v == "SpecError") == 40  # none of them is a matrix


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), anchors=st.integers(1, 8), depth=st.integers(1, 50), fanout=st.integers(1, 10))
def test_generated_documents_fail_cleanly(tmp_path_factory: pytest.TempPathFactory, seed: int, anchors: int, depth: int, fanout: int) -> None:
    """Property: whatever the nesting and aliasing, loading ends in an envmatrix error (exit 2), never another exception."""
    path = tmp_path_factory.mktemp("gen") / "m.yaml"
    path.write_text(random_document(random.Random(seed), anchors, depth, fanout))
    with pytest.raises(EnvmatrixError) as info:
        load(path)
    assert info.value.exit_code == 2


@settings(max_examples=40, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
        max_leaves=40,
    )
)
def test_random_values_in_every_profile_field(tmp_path_factory: pytest.TempPathFactory, junk: object) -> None:
    """Property: any YAML value in any profile or scenario field gives a matrix or an error naming it, never a traceback."""
    base = yaml.safe_load(base_text())
    fields = ["cuda", "torch", "include", "exclude", "select", "skip", "base_images", "wheelhouse", "build_from_source", "scenarios"]
    for name in fields:
        data = json.loads(json.dumps(base))
        data["profiles"]["cpu"][name] = junk
        data["scenarios"]["fp32-sdpa"] = junk if name == "scenarios" else data["scenarios"]["fp32-sdpa"]
        path = tmp_path_factory.mktemp("junk") / "m.yaml"
        path.write_text(yaml.safe_dump(data))
        try:
            load(path)
        except EnvmatrixError as exc:
            assert exc.exit_code == 2
