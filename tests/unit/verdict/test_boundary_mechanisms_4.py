"""Issue 41, fourth round: what the earlier held-out sets' remaining caller/callee misses taught (each log here is written
for its mechanism; none is a held-out log): a user's script calling a name several frameworks define, a project checked
out beside its same-named package, and a callee the log cannot name."""

from __future__ import annotations

import pytest

from envmatrix.facts import nameindex
from envmatrix.verdict.boundary import of, project_of
from envmatrix.verdict.logscan import scan_text

SITE = "/opt/conda/lib/python3.10/site-packages"


def boundary(log: str) -> tuple[str, str, str]:
    b = of(scan_text(log.encode()).raised[-1])
    assert b is not None
    return b.who, b.callee, b.caller_reason


def test_a_name_frameworks_define_after_the_library_they_build_on_is_the_librarys_when_no_framework_frame_is_printed() -> None:
    found = nameindex.definers("TrainingArguments")
    assert "transformers" in found and len(found) > 1
    plain = nameindex.resolve("TrainingArguments", caller="user")
    assert plain.dist == "transformers" and "require transformers and build on it" in plain.reason, plain
    framework = next(d for d in found if d != "transformers")
    beside = nameindex.resolve("TrainingArguments", caller="user", around=[framework])
    assert beside.dist == framework, beside  # a frame of the framework printed: its own class


def test_trainer_stays_ambiguous_where_a_definer_does_not_build_on_the_others() -> None:
    assert nameindex.resolve("Trainer", caller="").ambiguous


def test_the_users_script_is_the_caller_even_when_the_callee_cannot_be_named() -> None:
    log = """Traceback (most recent call last):
  File "/home/me/proj/run.py", line 9, in <module>
    go()
  File "/home/me/proj/run.py", line 5, in go
    NoSuchThingAnywhere(alpha=1)
TypeError: NoSuchThingAnywhere.__init__() got an unexpected keyword argument 'alpha'
"""
    who, callee, why = boundary(log)
    assert (who, callee) == ("proj (your code)", ""), (who, why)
    assert why.startswith("run.py.go made the call"), why


@pytest.mark.parametrize(
    ("path", "project"),
    [
        ("/root/tmp/Corrector/Corrector/llm/../llm/train/run.py", "Corrector"),
        ("/home/u/my-proj/my_proj/train.py", "my-proj"),
        ("/mnt/data/data/experiments/grpo.py", "experiments"),
        ("/workspace/open-r1/src/open_r1/grpo.py", "open-r1"),
    ],
)
def test_a_checkout_holding_its_same_named_package_names_the_project(path: str, project: str) -> None:
    assert project_of(path) == project


def test_a_call_into_a_library_is_named_with_both_sides_from_a_script_or_a_framework() -> None:
    log = """Traceback (most recent call last):
  File "/root/tmp/Corrector/Corrector/llm/train/lora.py", line 174, in train_model
    training_args = TrainingArguments(
TypeError: TrainingArguments.__init__() got an unexpected keyword argument 'evaluation_strategy'
"""
    who, callee, _ = boundary(log)
    assert (who, callee) == ("Corrector (your code)", "transformers")
    framed = f"""Traceback (most recent call last):
  File "/root/x/run.py", line 3, in <module>
    main()
  File "{SITE}/llamafactory/train/tuner.py", line 50, in main
    args = TrainingArguments(**kw)
TypeError: TrainingArguments.__init__() got an unexpected keyword argument 'evaluation_strategy'
"""
    who, callee, _ = boundary(framed)
    assert (who, callee) == ("llamafactory", "transformers")  # the framework called; it imports the class from transformers
