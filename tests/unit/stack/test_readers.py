"""The stack readers: requirements files (pins, extras, options, includes, local tags), PEP 751 pylock.toml,
uv.lock, and an interpreter's distributions."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from envmatrix.errors import InputError
from envmatrix.stack import read_stack
from envmatrix.stack.interpreter import read_interpreter
from envmatrix.stack.locks import lowest_python
from envmatrix.stack.requirements import logical_lines

REQUIREMENTS = """\
# the team's training stack
--index-url https://pypi.example/simple
--extra-index-url=https://download.pytorch.org/whl/cu128
-f ./wheels
torch==2.8.0+cu128  # CUDA 12.8 build
transformers==4.57.6 \\
    --hash=sha256:4c9e9de11333ddfe5114bc872c9f370509198acf0b87a832a0ab9458e2bd0550
trl[vllm]==0.19.1
accelerate>=1.2
numpy==2.1.3 ; python_version >= "3.9"
oldlib==1.0 ; python_version < "3"
-e ./our-code
"""


def test_requirements_pins_extras_options_and_local_tags(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text(REQUIREMENTS)
    stack = read_stack(path)
    assert {k: (p.version, p.local) for k, p in stack.pins.items()} == {
        "torch": ("2.8.0", "cu128"), "transformers": ("4.57.6", ""), "trl": ("0.19.1", ""), "numpy": ("2.1.3", ""),
    }  # fmt: skip
    assert stack.pins["torch"].where == f"{path}:5" and stack.pins["transformers"].where == f"{path}:6"
    assert stack.index_url == "https://pypi.example/simple" and stack.extra_index_urls == ["https://download.pytorch.org/whl/cu128"]
    assert stack.find_links == ["./wheels"]
    assert stack.ranges["accelerate"] == (">=1.2", f"{path}:9")
    assert any("oldlib left out" in n for n in stack.notes) and any("editable" in n for n in stack.notes)
    assert any("trl[vllm]" in n for n in stack.notes)


def test_included_files_are_read_relative_to_the_including_one(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "base.txt").write_text("torch==2.13.0\n-c pins.txt\n")
    (tmp_path / "sub" / "pins.txt").write_text("transformers==4.51.3\nfoo>=1\n")
    (tmp_path / "requirements.txt").write_text("-r sub/base.txt\ntrl==0.18.2\n")
    stack = read_stack(tmp_path / "requirements.txt")
    assert sorted(stack.pins) == ["torch", "transformers", "trl"]
    assert "foo" not in stack.ranges, "a constraint that pins nothing is not a requirement of the stack"


@pytest.mark.parametrize(
    ("name", "text", "expect"),
    [
        ("requirements.txt", "torch==2.13.0\ntorch ==== 2\n", ":2: "),
        ("requirements.txt", "torch==2.13.0\n--frobnicate x\n", ":2: unknown option"),
        ("requirements.txt", "torch==2.13.0\ntransformers==4.51.3\ntorch==2.8.0\n", ":3: torch pinned again at 2.8.0, already 2.13.0"),
        ("requirements.txt", "-r\n", ":1: -r needs a value"),
        ("requirements.txt", "torch==2.13.0 ; python_version <> '3'\n", ":1: "),
        ("requirements.txt", "-r requirements.txt\n", "included more than"),
        ("requirements.txt", "torch @ \n", ":1: "),
        ("pylock.toml", 'lock-version = "2.0"\n', "lock-version '2.0'"),
        ("pylock.toml", 'lock-version = "1.0"\n[[packages]]\nversion = "1"\n', "pylock.toml:2: \\[\\[packages\\]\\] #1 has no name"),
        ("pylock.toml", 'lock-version = "1.0"\n[[packages]]\nname = "x"\nversion = 3\n', "version must be a string"),
        ("pylock.toml", 'lock-version = "1.0"\n[[packages]]\nname = "x"\nversion = "not a version"\n', "not a PEP 440 version"),
        ("pylock.toml", 'lock-version = "1.0"\nrequires-python = ">=4"\n', "admits no Python 3"),
        ("pylock.toml", 'lock-version = "1.0"\n[[packages]\n', "pylock.toml:2: not valid TOML"),
        ("pylock.toml", 'lock-version = "1.0"\npackages = "x"\n', "must be an array of tables"),
    ],
)
def test_bad_files_name_the_file_and_line(tmp_path: Path, name: str, text: str, expect: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError, match=expect if name.endswith(".toml") else re.escape(expect)) as err:
        read_stack(path)
    assert str(path) in str(err.value)


def test_logical_lines_join_continuations_and_drop_comments() -> None:
    assert logical_lines("a==1 \\\n  --hash=x\n# c\nb==2 # note\nurl#frag==1\n") == [(1, "a==1    --hash=x"), (4, "b==2"), (5, "url#frag==1")]


PYLOCK = """\
lock-version = "1.0"
requires-python = "==3.11.*"
created-by = "envmatrix"

[[packages]]
name = "torch"
version = "2.13.0+cpu"

[[packages.wheels]]
name = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
url = "file:///opt/wheels/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"
hashes = {sha256 = "00"}

[[packages]]
name = "Transformers"
version = "4.51.3"

[[packages]]
name = "our-project"
directory = { path = "." }

[tool.envmatrix]
vetted = ["trl-grpo"]
"""


def test_pylock_reads_versions_local_tags_and_python(tmp_path: Path) -> None:
    path = tmp_path / "pylock.toml"
    path.write_text(PYLOCK)
    stack = read_stack(path)
    assert (stack.pins["torch"].version, stack.pins["torch"].local) == ("2.13.0", "cpu")
    assert stack.pins["transformers"].version == "4.51.3" and stack.pins["transformers"].where == f"{path}:14"
    assert stack.python is not None and stack.python[0] == "3.11"
    assert "our-project" not in stack.pins


def test_pylock_local_tag_from_the_wheel_name_when_the_version_has_none(tmp_path: Path) -> None:
    path = tmp_path / "pylock.toml"
    path.write_text(PYLOCK.replace('version = "2.13.0+cpu"', 'version = "2.13.0"'))
    assert read_stack(path).pins["torch"].local == "cpu"


UV_LOCK = """\
version = 1
revision = 3
requires-python = ">=3.11"

[[package]]
name = "demo"
version = "0.1.0"
source = { virtual = "." }

[[package]]
name = "torch"
version = "2.13.0+cpu"
source = { registry = "https://download.pytorch.org/whl/cpu" }

[[package]]
name = "trl"
version = "0.18.2"
source = { registry = "https://pypi.org/simple" }

[[package]]
name = "trl"
version = "0.19.1"
source = { registry = "https://pypi.org/simple" }
resolution-markers = ["python_full_version >= '3.12'"]
"""


def test_uv_lock_skips_the_project_and_keeps_the_first_fork(tmp_path: Path) -> None:
    path = tmp_path / "uv.lock"
    path.write_text(UV_LOCK)
    stack = read_stack(path)
    assert sorted(stack.pins) == ["torch", "trl"] and stack.pins["trl"].version == "0.18.2"
    assert stack.pins["torch"].local == "cpu" and stack.python is not None and stack.python[0] == "3.11"
    assert any("trl is locked as 0.18.2, 0.19.1" in n and "kept 0.18.2" in n for n in stack.about["trl"])


def test_uv_lock_without_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "uv.lock"
    path.write_text('[[package]]\nname = "x"\n')
    with pytest.raises(InputError, match=r"not a uv\.lock"):
        read_stack(path)


def test_lowest_python() -> None:
    assert lowest_python(">=3.10,<3.13", "f") == "3.10" and lowest_python("==3.12.*", "f") == "3.12" and lowest_python("~=3.11.4", "f") == "3.11"


def test_this_interpreter_and_another_one(tmp_path: Path) -> None:
    stack = read_interpreter()
    assert stack.python is not None and stack.python[0] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert "packaging" in stack.pins
    with pytest.raises(InputError, match="no such interpreter"):
        read_interpreter(str(tmp_path / "python"))


def test_forms_real_requirements_files_use(tmp_path: Path) -> None:
    """A byte-order mark, a bare wheel URL line with a marker, `name @ wheel-URL`, a VCS requirement at a tag, and a
    constraint that nothing installs: each read as pip would, and said where it is not an axis."""
    wheel = "https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3/flash_attn-2.8.3%2Bcu12torch2.7cxx11abiFALSE-cp311-cp311-linux_x86_64.whl"
    (tmp_path / "c.txt").write_text("transformers==4.53.2\nvllm==0.9.2\n")
    path = tmp_path / "requirements.txt"
    path.write_text(
        "\ufefftorch==2.7.1+cu128\ntransformers\n"
        f"{wheel} ; sys_platform == 'linux'\n"
        "liger-kernel @ https://example.org/wheels/liger_kernel-0.6.0-py3-none-any.whl\n"
        "trl @ git+https://github.com/huggingface/trl.git@v0.19.1\n"
        "-c c.txt\n",
        encoding="utf-8",
    )
    stack = read_stack(path)
    assert stack.pins["torch"].local == "cu128" and stack.pins["flash-attn"].version == "2.8.3"
    assert stack.pins["liger-kernel"].version == "0.6.0" and stack.pins["transformers"].version == "4.53.2"
    assert "trl" not in stack.pins and "pin trl==0.19.1 to make it an axis" in stack.about["trl"][0]
    assert "vllm" not in stack.pins and "only a constraint" in stack.about["vllm"][0]


def test_a_url_line_without_a_name_is_refused_on_one_line(tmp_path: Path) -> None:
    path = tmp_path / "requirements.txt"
    path.write_text("https://example.org/archive/v1.tar.gz\n")
    with pytest.raises(InputError) as err:
        read_stack(path)
    assert "\n" not in str(err.value) and "#egg=NAME" in str(err.value)


def test_a_pylock_with_per_python_entries_keeps_the_one_for_its_python(tmp_path: Path) -> None:
    path = tmp_path / "pylock.toml"
    path.write_text(
        'lock-version = "1.0"\nrequires-python = ">=3.10"\n'
        '[[packages]]\nname = "torch"\nversion = "2.7.1"\n'
        '[[packages]]\nname = "networkx"\nversion = "3.4.2"\nmarker = "python_full_version < \'3.11\'"\n'
        '[[packages]]\nname = "networkx"\nversion = "3.6.1"\nmarker = "python_full_version >= \'3.11\'"\n'
    )
    stack = read_stack(path)
    assert stack.python is not None and stack.python[0] == "3.10" and stack.pins["networkx"].version == "3.4.2"
    assert any("3.6.1 left out" in n for n in stack.about["networkx"])


def test_a_uv_lock_with_builds_of_one_release_says_which_it_kept(tmp_path: Path) -> None:
    text = 'version = 1\nrequires-python = ">=3.11"\n' + "".join(
        f'[[package]]\nname = "torch"\nversion = "{v}"\nsource = {{ registry = "https://download.pytorch.org/whl" }}\n'
        for v in ("2.10.0+cu128", "2.10.0+cu130")
    )
    for name in ("uv.lock", "team-uv-py311.lock"):  # a copy under another name is known by its content
        path = tmp_path / name
        path.write_text(text)
        stack = read_stack(path)
        assert stack.pins["torch"].local == "cu128"
        assert "torch is locked as 2.10.0+cu128, 2.10.0+cu130" in stack.about["torch"][0]
