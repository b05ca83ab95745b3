"""Issue 41, nineteenth round: the class an `__init__()` printed without it was built from, where a decorator passed the
call on (the frame above built it); failures in their own words (DDP's unreduced parameters, a gradient norm always NaN,
an exception named by its module path inside a sentence, the user's words for an OOM or a zero gradient); a link to a
line of a package's source as the caller; the name index's pinned rebuild. Each log is written for its mechanism; none
is a held-out log."""

from __future__ import annotations

import pytest
from verdicts import sides, verdict

from envmatrix.facts.nameindex_build import pinned

SITE = "/usr/local/lib/python3.10/site-packages"


def test_a_class_built_through_a_decorator_is_named_by_the_frame_above() -> None:
    log = (
        "Traceback (most recent call last):\n"
        '  File "/home/u/rl/dpo_train.py", line 49, in <module>\n'
        "    dpo_trainer = DPOTrainer(\n"
        f'  File "{SITE}/transformers/utils/deprecation.py", line 165, in wrapped_func\n'
        "    return func(*args, **kwargs)\n"
        "TypeError: __init__() got an unexpected keyword argument 'beta'\n"
    )
    caller, callee, why = sides(log)
    assert (caller, callee) == ("rl (your code)", "trl"), why
    # the frame above calls no class: nothing to name, not a guess from the decorator's package
    assert sides(log.replace("DPOTrainer(", "build(config)"))[1] != "trl"


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        (
            "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This error"
            " indicates that your module has parameters that were not used in producing loss.\n",
            "grad_lost",
        ),
        ("Training the critic: grad_norm is always nan\n", "nan_loss"),
        ("after 30 steps the loss is still nan\n", "nan_loss"),
        # an exception named by its module path inside a sentence, and behind a component's level
        ("有人遇到 triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 98304, Hardware limit: 65536 吗\n", "unsupported_gpu"),
        (
            "[16:10:33] worker/ERROR  triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 98304, Hardware limit: 65536\n",
            "unsupported_gpu",
        ),
        # only the user's words tell the failure
        ("Full fine-tuning with torchrun on two cards, batch size 1: we hit OOM right away\n", "oom"),
        ("全量微调 Qwen，报 OOM\n", "oom"),
        ("After running the script I am getting 0 loss and 0 grad_norm on every step\n", "zero_grad"),
        # not words of a failure: advice, or a module path in prose
        ("Lower the batch size to avoid OOM on smaller cards.\n", "inconclusive"),
        ("See torch.nn.Module: the base class of every model.\n", "inconclusive"),
    ],
)
def test_a_failure_in_its_own_words(log: str, expected: str) -> None:
    assert verdict(log) == expected


def test_ddp_marking_a_parameter_twice_outranks_the_reduction_it_then_misses() -> None:
    log = (
        "RuntimeError: Expected to mark a variable ready only once. This error is caused by use of a module parameter outside"
        " the `forward` function.\n"
        "RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one.\n"
    )
    assert verdict(log) == "ddp_ready_twice"


def test_a_link_to_a_line_of_a_packages_source_names_the_caller() -> None:
    log = (
        "The logging change breaks https://github.com/example/Trainer/blob/0123abc/trl/trainer/utils.py#L9\n"
        "`ImportError: cannot import name 'top_k_top_p_filtering' from 'transformers'`\n"
    )
    caller, callee, why = sides(log)
    assert (caller, callee) == ("trl", "transformers"), why
    # a link to the callee's own source is no caller
    assert sides(log.replace("/trl/trainer/", "/transformers/generation/"))[0] != "transformers"


def test_a_pinned_rebuild_fetches_the_recorded_releases_and_only_the_sources_new_to_the_list() -> None:
    specs = pinned(("torch", "transformers==4.30.2", "transformers==2.0.0", "a-package-not-indexed"))
    assert specs.count("transformers==4.30.2") == 1  # recorded: fetched as recorded, once
    assert "torch" not in specs and any(s.startswith("torch==") for s in specs)  # recorded at its release, not the newest
    assert specs[-2:] == ("transformers==2.0.0", "a-package-not-indexed")  # new to the list: added, nothing else moves
