"""The log read as structure: prefixes removed, tracebacks rebuilt with each frame's distribution, rules parsed and
applied in order, error codes read from the tables the libraries themselves print."""

from __future__ import annotations

import pytest

from envmatrix.facts import errorcodes
from envmatrix.verdict.lines import clean, unflatten
from envmatrix.verdict.rules import judge, parse, rules
from envmatrix.verdict.tracebacks import Raised, Reader, frame_of


@pytest.mark.parametrize(
    ("raw", "text", "stream"),
    [
        ("[rank3]: RuntimeError: x", "RuntimeError: x", "rank3"),
        ("(WorkerDict pid=77) [2025-01-02 03:04:05,678 E 77 77] logging.cc:484: *** SIGFPE received", "*** SIGFPE received", "pid=77"),
        ("ERROR 11-10 23:43:19 [engine.py:187] AssertionError()", "AssertionError()", ""),
        ("B-node/0 [default1]:[rank1]: ValueError: y", "ValueError: y", "default1/rank1"),
        ("2026-01-02 03:04:05,678 - trainer - ERROR - KeyError: 'a'", "KeyError: 'a'", ""),
        ("E0318 17:25:16.769000 139867688847168 torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: -8)", "failed (exitcode: -8)", ""),
        ('svc-name  |   File "/x.py", line 3, in f', 'File "/x.py", line 3, in f', ""),
        ("\x1b[31m[rank0]:\x1b[0m TypeError: z", "TypeError: z", "rank0"),
        ("【2023-07-09 22:14:41】RuntimeError: w", "RuntimeError: w", ""),
        ("Oct 04 13:19:39 host unit[394]: NVIDIA GPU sm_120 is not compatible", "NVIDIA GPU sm_120 is not compatible", ""),
        ("RuntimeError: keeps its own words", "RuntimeError: keeps its own words", ""),
    ],
)
def test_prefixes_are_removed_and_the_stream_named(raw: str, text: str, stream: str) -> None:
    got = clean(raw)
    assert (got.text, got.stream) == (text, stream)


def test_a_flattened_traceback_is_split() -> None:
    assert unflatten('x "Traceback (most recent call last):\\n  File \\"a.py\\", line 1, in f\\nKeyError: 1"') == [
        'x "Traceback (most recent call last):',
        '  File "a.py", line 1, in f',
        'KeyError: 1"',
    ]
    assert unflatten("plain \\n text") == ["plain \\n text"]


@pytest.mark.parametrize(
    ("path", "package", "module"),
    [
        ("/venv/lib/python3.11/site-packages/deepspeed/runtime/zero/stage3.py", "deepspeed", "deepspeed.runtime.zero.stage3"),
        ("C:\\env\\Lib\\site-packages\\flash_attn\\__init__.py", "flash-attn", "flash_attn"),
        ("/usr/local/lib/python3.12/dist-packages/torch/distributed/fsdp/_flat_param.py", "torch", "torch.distributed.fsdp._flat_param"),
        ("/workspace/verl/verl/trainer/main_ppo.py", "verl", "verl.trainer.main_ppo"),
        ("/usr/lib/python3.12/multiprocessing/process.py", "python", "process"),
        ("/home/me/project/train.py", "", ""),
    ],
)
def test_a_frame_knows_its_distribution(path: str, package: str, module: str) -> None:
    frame = frame_of(path, 1, "f")
    assert (frame.package, frame.module) == (package, module)


def feed(text: str) -> tuple[Raised, ...]:
    reader = Reader()
    for no, line in enumerate(text.splitlines(), 1):
        reader.feed(clean(line), no)
    return reader.raised()


def test_chained_exceptions_keep_their_cause_and_raising_package() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "/v/site-packages/vllm/v1/engine/core.py", line 5, in run\n'
        "    step()\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        "\nThe above exception was the direct cause of the following exception:\n\n"
        "Traceback (most recent call last):\n"
        '  File "/home/me/run.py", line 9, in <module>\n'
        "    main()\n"
        '  File "/v/site-packages/trl/trainer/grpo_trainer.py", line 7, in gen\n'
        "    llm.generate()\n"
        "RuntimeError: Engine core initialization failed. See root cause above.\n"
    )
    first, second = feed(text)
    assert first.types == ("torch.OutOfMemoryError", "OutOfMemoryError") and first.package == "vllm"
    assert second.cause is first and second.package == "trl" and second.caller == "user"
    assert [j.outcome for j in map(judge, (first, second))] == ["oom", "error"]


def test_faulthandler_dumps_are_frames_most_recent_first() -> None:
    text = (
        "Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n"
        '  File "/v/site-packages/flash_attn/flash_attn_interface.py", line 90 in _fwd\n'
        '  File "/home/me/train.py", line 3 in <module>\n'
    )
    (fatal,) = feed(text)
    assert fatal.fatal and fatal.package == "flash-attn" and fatal.caller == "user"
    assert judge(fatal).outcome == "crash"


def test_a_cut_traceback_says_what_its_last_frame_raises() -> None:
    text = '  File "/v/site-packages/vllm/core/kv.py", line 9, in check\n    raise ValueError("No available memory for the cache blocks. "\n'
    (cut,) = feed(text)
    assert cut.truncated and cut.type == "ValueError" and judge(cut).outcome == "oom"


def test_the_shipped_rules_parse_and_name_every_outcome_they_use() -> None:
    assert len(rules()) >= 20
    assert {r.outcome for r in rules()} >= {"oom", "api_mismatch", "engine_error", "nccl_error", "unsupported_gpu", "missing_module", "@code"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("oops error.type:X", "unknown outcome 'oops'"),
        ("oom error.typo:X", "unknown key 'error.typo'"),
        ("oom error.value:/(unclosed/", "error.value:/(unclosed/"),
        ("oom", "at least one matcher"),
        ("oom error.value:{nowhere}", "nowhere"),
    ],
)
def test_a_bad_rule_is_refused_naming_its_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"rules\.txt:2: ") as err:
        parse("# a comment\n" + text)
    assert message in str(err.value)


def test_rules_apply_in_order_and_negation_holds() -> None:
    custom = parse('api_mismatch:a error.type:AttributeError !error.value:"*NoneType*"\nerror:b error.type:AttributeError\n')
    mismatch, plain = (Raised("AttributeError", v) for v in ("'Foo' object has no attribute 'x'", "'NoneType' object has no attribute 'x'"))
    assert next(r.name for r in custom if r.matches(mismatch)) == "api_mismatch:a"
    assert next(r.name for r in custom if r.matches(plain)) == "error:b"


def test_every_code_reads_back_from_each_form_it_is_printed_in() -> None:
    table = errorcodes.table()
    families = {c.family for c in table}
    assert {"cuda_runtime", "cuda_driver", "nccl", "cublas", "cudnn"} <= families
    assert all(family in errorcodes.sources() for family in families)
    for code in table:  # a name kept across renumberings (cuDNN 8 to 9) reads as the same code
        assert [(c.family, c.name) for c in errorcodes.find(f"failed with {code.name} here")] == [(code.family, code.name)], code
        if code.family == "cuda_runtime" and code.messages and len(code.messages[0]) >= 12:
            assert code in errorcodes.find(f"RuntimeError: CUDA error: {code.messages[0]}") or any(
                c.messages == code.messages for c in errorcodes.find(f"RuntimeError: CUDA error: {code.messages[0]}")
            ), code
    assert errorcodes.find("CUDA error at x.cu:9 code=700(cudaErrorIllegalAddress)")[0].outcome == "crash"
    assert errorcodes.find("cuda runtime error (2) : out of memory at /pytorch/THC.cu:1")[0].outcome == "oom"
    nccl = errorcodes.find("NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error (run with NCCL_DEBUG=INFO for details)")
    assert [c.name for c in nccl] == ["ncclSystemError"]
