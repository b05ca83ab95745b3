"""Issue 41, tenth round: the other side of a member or keyword asked of a class no index resolves (a remote model's
class, an `__init__()` printed without its class), from the members and keywords the indexed releases' classes have;
the asker of a frameless missing attribute; `(unknown location)` under another package; NCCL's result codes in WARN
lines; a reply told as nonsense. Each log is written for its mechanism; none is a held-out log."""

from __future__ import annotations

import ast

from verdicts import last_boundary, sides, verdict

from envmatrix.facts import nameindex
from envmatrix.facts.nameindex_build import read_members

SITE = "/opt/conda/lib/python3.10/site-packages"


def _traceback(*frames: tuple[str, int, str, str], error: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, function, source in frames:
        lines += [f'  File "{path}", line {line}, in {function}', f"    {source}"]
    return "\n".join([*lines, error]) + "\n"


def test_the_builder_reads_members_and_keywords() -> None:
    tree = ast.parse(
        "class Model:\n"
        "    supports_cache: bool = True\n"
        "    def enable_input_require_grads(self, *, keep=False):\n"
        "        self.hooked = True\n"
        "def train(model, warmup_ratio=0.1):\n"
        "    pass\n"
    )
    members, keywords = read_members(tree)
    assert {"supports_cache", "enable_input_require_grads", "hooked"} <= members
    assert {"keep", "warmup_ratio", "supports_cache"} <= keywords  # a dataclass field is a keyword of its __init__
    assert "model" not in keywords and "self" not in keywords  # every callable takes them: they tell nothing


def test_the_index_knows_whose_classes_have_a_member() -> None:
    assert nameindex.resolve("warnings_issued", table="members").dist == "transformers"
    assert nameindex.resolve("evaluation_strategy", table="keywords").dist == "transformers"
    assert nameindex.resolve("no_such_member_anywhere", table="members").dist == ""


def test_a_remote_models_class_lacking_a_member_of_its_base_class_is_built_on_that_package() -> None:
    log = "transformers==4.30.2\n" + _traceback(
        ("/work/finetune.py", 41, "<module>", "model.warnings_issued = {}"),
        error="AttributeError: 'ChatGLMForConditionalGeneration' object has no attribute 'warnings_issued'",
    )
    assert verdict(log) == "api_mismatch"
    assert sides(log)[:2] == ("your code", "transformers")  # `/work/` names no project
    assert last_boundary(log.split("\n", 1)[1]).callee == ""  # without the stated release the log shows no transformers


def test_a_member_is_never_given_to_a_package_the_log_does_not_show() -> None:
    """paddle's `EagerParamBase` (paddle is no indexed package) lacking a member one indexed package happens to have: not
    that one."""
    log = _traceback(
        (f"{SITE}/paddle/base/framework.py", 366, "__getattr__", "raise AttributeError("),
        error="AttributeError: 'EagerParamBase' object has no attribute 'warnings_issued'",
    )
    assert last_boundary(log).callee == ""


def test_a_library_asking_its_own_member_of_a_class_it_was_handed_calls_back_into_that_class() -> None:
    log = _traceback(
        ("/work/train.py", 12, "<module>", "trainer.train()"),
        (f"{SITE}/transformers/trainer.py", 1535, "train", "self.model.warnings_issued['x'] = True"),
        error="AttributeError: 'ChatGLMForConditionalGeneration' object has no attribute 'warnings_issued'",
    )
    crossed = last_boundary(log)
    assert (crossed.caller, crossed.callee) == ("transformers", "user"), crossed.callee_reason


def test_an_init_printed_without_its_class_refusing_a_keyword_only_one_stated_package_takes() -> None:
    log = "transformers 3.3.1\ntorch 1.6.0\n" + _traceback(
        ("/work/run.py", 20, "<module>", "main()"),
        ("/work/run.py", 9, "main", "args = make_args(**cfg)"),
        error="TypeError: __init__() got an unexpected keyword argument 'evaluation_strategy'",
    )
    assert verdict(log) == "api_mismatch"
    who, callee, _ = sides(log)
    assert (who, callee) == ("your code", "transformers")  # `/work/` names no project
    alone = _traceback(
        ("/work/run.py", 9, "main", "args = make_args(**cfg)"), error="TypeError: __init__() got an unexpected keyword argument 'evaluation_strategy'"
    )
    assert last_boundary(alone).callee == ""  # the log shows no transformers: never from the index alone


def test_a_frameless_missing_attribute_was_asked_by_the_one_package_the_code_shown_hands_the_object_to() -> None:
    failed = "AttributeError: 'LlamaAttention' object has no attribute 'num_heads'\n"
    who, callee, why = sides("I call `engine, _, _, _ = deepspeed.initialize(model=model, config=cfg)` and get\n\n" + failed)
    assert (who, callee) == ("deepspeed", "transformers"), why
    assert sides("my code runs `n = attn.num_heads` after `deepspeed.initialize(model=model)`:\n\n" + failed)[0] == "your code"  # it reads it itself
    assert sides(failed)[0] == "your code"


def test_a_name_with_no_file_imported_by_an_installed_package_is_a_mismatch_and_by_the_users_code_a_missing_package() -> None:
    by_library = _traceback(
        ("/srv/run.py", 3, "<module>", "import accelerate.utils"),
        (f"{SITE}/accelerate/utils/megatron_lm.py", 30, "<module>", "from megatron import get_args"),
        error="ImportError: cannot import name 'get_args' from 'megatron' (unknown location)",
    )
    assert verdict(by_library) == "api_mismatch"
    assert sides(by_library)[:2] == ("accelerate", "megatron-core")
    by_user = _traceback(
        ("/srv/run.py", 3, "<module>", "from datasets import load_dataset"),
        error="ImportError: cannot import name 'load_dataset' from 'datasets' (unknown location)",
    )
    assert verdict(by_user) == "missing_module"


def test_nccl_passing_a_failed_calls_result_code_up_its_stack_is_an_nccl_failure() -> None:
    log = "(Actor pid=1) [host][1:1][0][group.cc:585] NCCL WARN group.cc:585 -> 3\n(Actor pid=1) [host][1:1][0][init.cc:2103] NCCL INFO init.cc:2103 -> 3\n"
    assert verdict(log) == "nccl_error"
    healthy = "node1:2:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\nnode1:2:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE\n"
    assert verdict(healthy) != "nccl_error"


def test_a_reply_told_as_nonsense_or_repeating_itself_is_garbled_output_when_nothing_else_fired() -> None:
    for said in (
        "合并之后，模型会出现胡乱回答的问题。",
        "After the merge the answers are nonsense.",
        "The model keeps repeating the same phrase over and over.",
    ):
        assert verdict(said + "\n") == "garbled_output", said
    assert verdict("It is nonsense that the loader needs a GPU.\n") != "garbled_output"  # a word alone tells no output
