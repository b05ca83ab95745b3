"""Issue 41, second round: the call-boundary mechanisms the fourth held-out set's misses taught (heldout-logs-4/README.md,
"What happened next"). Each log here is written for its mechanism (none is a held-out log): a constructor printed
without its class (Python <= 3.9), a library's wrapper frame between the caller and the callee, a user's subclass, the
`cannot import name` message printed alone, a range statement, and Ray's list of possible causes."""

from __future__ import annotations

import pytest

from envmatrix.verdict.boundary import Boundary, constructed, of, project_of
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import scan_text
from envmatrix.verdict.remedies import sentence

SITE = "/opt/conda/lib/python3.9/site-packages"


def last_boundary(log: str) -> Boundary:
    scan = scan_text(log.encode())
    found = [b for j in scan.judged if (b := of(j.raised)) is not None]
    assert found, scan.judged
    return found[-1]


def test_a_constructor_printed_without_its_class_is_named_by_the_source_line_under_the_last_frame() -> None:
    log = """Traceback (most recent call last):
  File "/home/ana/rlhf-lab/train.py", line 12, in <module>
    main()
  File "/home/ana/rlhf-lab/train.py", line 9, in main
    acc = Accelerator(dispatch_batches=True, mixed_precision="bf16")
TypeError: __init__() got an unexpected keyword argument 'dispatch_batches'
"""
    b = last_boundary(log)
    assert (b.caller, b.callee, b.name) == ("user", "accelerate", "Accelerator.__init__"), b
    assert b.who == "rlhf-lab (your code)"
    assert "rlhf-lab (your code) passes the keyword `dispatch_batches` to accelerate's Accelerator.__init__()" in sentence(b, {})


def test_a_two_line_excerpt_keeps_its_source_line_above_the_exception() -> None:
    log = """some output
    engine = LLMEngine.from_engine_args(EngineArgs(**kwargs))
TypeError: __init__() got an unexpected keyword argument 'limit_mm_per_prompt'
"""
    b = last_boundary(log)
    assert (b.callee, b.name) == ("vllm", "EngineArgs.__init__"), b
    # no frame printed at all: the program that ran, said as such (its reason says the log shows no more)
    assert b.caller == "user" and "no frame is printed" in b.caller_reason, b


def test_a_constructor_without_a_source_line_is_ambiguous_never_guessed() -> None:
    log = f"""Traceback (most recent call last):
  File "/home/ana/proj/run.py", line 3, in <module>
    main()
  File "{SITE}/vllm/entrypoints/llm.py", line 53, in __init__
TypeError: __init__() got an unexpected keyword argument 'trust_remote_code'
"""
    b = last_boundary(log)
    assert b.callee == "" and "ambiguous" in b.callee_reason, b


@pytest.mark.parametrize(
    ("source", "member", "name"),
    [
        ("llm = LLM(model=path, trust_remote_code=True)", "trust_remote_code", "LLM"),
        ("x = Outer(Inner(a=1), b=2)", "a", "Inner"),
        ("x = Outer(Inner(a=1), b=2)", "b", "Outer"),
        ("x = Outer(Inner(**kw))", "zzz", ""),  # two classes, the keyword on neither: ambiguous
        ("self.model = Engine.from_args(Args(**kw))", "zzz", "Args"),  # one class constructed; from_args is a method
    ],
)
def test_the_class_a_source_line_constructs(source: str, member: str, name: str) -> None:
    assert constructed(source, member)[0] == name


def test_a_librarys_wrapper_frame_is_not_the_caller() -> None:
    log = f"""Traceback (most recent call last):
  File "/srv/proj-x/examples/sft/run_sft.py", line 40, in <module>
    trainer = SFTTrainer(model=m, max_seq_length=512)
  File "{SITE}/transformers/utils/deprecation.py", line 172, in wrapped_func
    return func(*args, **kwargs)
  File "{SITE}/huggingface_hub/utils/_validators.py", line 114, in _inner_fn
    return fn(*args, **kwargs)
TypeError: SFTTrainer.__init__() got an unexpected keyword argument 'max_seq_length'
"""
    b = last_boundary(log)
    assert (b.caller, b.callee) == ("user", "trl"), b
    assert b.who == "proj-x (your code)"


def test_a_users_wrapper_is_the_users_code() -> None:
    log = f"""Traceback (most recent call last):
  File "/srv/proj-x/train.py", line 40, in wrapper
    trainer = SFTTrainer(model=m, max_seq_length=512)
  File "{SITE}/trl/trainer/sft_trainer.py", line 10, in wrapper
    return f(*a, **k)
TypeError: SFTTrainer.__init__() got an unexpected keyword argument 'max_seq_length'
"""
    assert last_boundary(log).caller == "user"


def test_a_users_subclass_is_resolved_through_the_library_frame_that_called_into_it() -> None:
    log = f"""Traceback (most recent call last):
  File "/work/mezo-like/run.py", line 5, in <module>
    trainer.train()
  File "{SITE}/transformers/trainer.py", line 1539, in train
    return inner_training_loop(
  File "/work/mezo-like/my_trainer.py", line 555, in _inner_training_loop
    if self.deepspeed:
AttributeError: 'MyTrainer' object has no attribute 'deepspeed'
"""
    b = last_boundary(log)
    assert (b.caller, b.callee) == ("user", "transformers"), b
    assert "subclasses" in b.callee_reason


def test_a_users_subclass_without_a_library_frame_is_named_by_its_base_and_member_together() -> None:
    """No library frame says whose subclass `MyTrainer` is; its name's base (`Trainer`, which several packages define) and
    the member asked (`deepspeed`, which of those only ms-swift's and transformers' classes have, ms-swift on top of
    transformers) say it together. A name that ends in no indexed class still names no callee."""
    log = """Traceback (most recent call last):
  File "/work/mezo-like/my_trainer.py", line 555, in _inner_training_loop
    if self.deepspeed:
AttributeError: 'MyTrainer' object has no attribute 'deepspeed'
"""
    assert last_boundary(log).callee == "transformers"
    assert last_boundary(log.replace("MyTrainer", "MyLoopRunnerThing")).callee == ""
    assert last_boundary(log.replace("deepspeed", "no_such_member_anywhere")).callee == ""


def test_a_bare_cannot_import_line_is_an_import_error() -> None:
    known = "run.sh started\n\ncannot import name 'AutoModelForCausalLMWithValueHead' from 'trl'\n"
    verdict = classify(RunFacts(scan=scan_text(known.encode())))
    assert verdict.outcome == "api_mismatch", verdict
    assert last_boundary(known).callee == "trl"
    never = "run.sh started\n\ncannot import name 'NoSuchThingAtAll' from 'trl'\n"
    assert classify(RunFacts(scan=scan_text(never.encode()))).outcome == "missing_module"


def test_a_range_statement_names_the_requiring_and_the_required_package() -> None:
    b = last_boundary("ImportError: trl requires transformers>=4.46.0, but found transformers==4.40.0\n")
    assert (b.kind, b.caller, b.callee) == ("range", "trl", "transformers"), b
    log = f"""Traceback (most recent call last):
  File "/home/ana/proj/train.py", line 3, in <module>
    args = TrainingArguments(output_dir="o")
  File "{SITE}/transformers/utils/versions.py", line 44, in require_version
    _compare_versions(op, got_ver, want_ver, requirement, pkg, hint)
ImportError: accelerate>=0.26.0 is required for a normal functioning of this module, but found accelerate==0.20.1.
"""
    b = last_boundary(log)
    assert (b.caller, b.callee) == ("transformers", "accelerate"), b


RAY_DIED = (
    "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: Worker "
    "unexpectedly exits with a connection error code 2. End of file. There are some potential root causes. (1) The process "
    "is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop --force is called. (3) The worker is crashed "
    "unexpectedly due to SIGSEGV or other unexpected errors.{extra}\n"
)


def test_rays_list_of_possible_causes_is_no_evidence_of_oom() -> None:
    verdict = classify(RunFacts(scan=scan_text(RAY_DIED.format(extra="").encode())))
    assert verdict.outcome != "oom", verdict
    confirmed = RAY_DIED.format(extra=" Memory on the node was 61.2GB / 62.0GB (0.98), which exceeds the memory usage threshold 0.95.")
    assert classify(RunFacts(scan=scan_text(confirmed.encode()))).outcome == "oom"


@pytest.mark.parametrize(
    ("path", "project"),
    [
        ("/workspace/open-r1/src/open_r1/grpo.py", "open-r1"),
        ("/home/Liger-Kernel-main/examples/huggingface/training.py", "Liger-Kernel"),
        ("/srv/G-Retriever/src/model/llm.py", "G-Retriever"),
        ("benchmark_latency.py", ""),
        ("<string>", ""),
    ],
)
def test_the_users_project_is_named_by_its_path(path: str, project: str) -> None:
    assert project_of(path) == project
