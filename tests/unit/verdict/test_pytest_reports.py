"""pytest's failure reports read as tracebacks (issue 41: users paste a library's failing test): the short form's frames
(`path.py:N: in f`), the long form's (`path.py:N:` after the source, the raising frame as `path.py:N: Type` after the
`E` lines), and `E   Type: message` as the exception line. Both logs are written for the mechanism."""

from __future__ import annotations

from envmatrix.verdict.boundary import of
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.logscan import scan_text

SITE = ".venv/lib/python3.12/site-packages"
END = " "  # pytest ends a long report's place line with a space

SHORT = f"""____________________ test_qwen2_5_vl ____________________
tests/test_monkey_patch.py:210: in test_apply_to_instance
    _apply_liger_kernel_to_instance(model=model)
{SITE}/liger_kernel/transformers/monkey_patch.py:2851: in _apply_liger_kernel_to_instance
    apply_fn(model=model, **applicable_kwargs)
{SITE}/liger_kernel/transformers/monkey_patch.py:1619: in apply_liger_kernel_to_qwen2_5_vl
    text_model = model.language_model
{SITE}/torch/nn/modules/module.py:1962: in __getattr__
    raise AttributeError(
E   AttributeError: 'Qwen2_5_VLForConditionalGeneration' object has no attribute 'language_model'
"""

LONG = f"""=================================== FAILURES ===================================
___________________________ test_generate_with_cache ___________________________

    def test_generate_with_cache():
>       out = model.generate(ids, max_new_tokens=4)

tests/test_generate.py:42:{END}
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _

self = PeftModelForCausalLM(...), args = ()

    def generate(self, *args, **kwargs):
>       return self.base_model.prepare_inputs_for_generation(*args, cache_position=pos, **kwargs)
E       TypeError: LlamaForCausalLM.prepare_inputs_for_generation() got an unexpected keyword argument 'cache_position'

{SITE}/peft/peft_model.py:1910: TypeError
=========================== short test summary info ============================
"""


def test_the_short_report_names_both_sides() -> None:
    scan = scan_text(SHORT.encode())
    assert classify(RunFacts(scan=scan)).outcome.value == "api_mismatch"
    (raised,) = scan.raised
    assert [f.package for f in raised.frames] == ["", "liger-kernel", "liger-kernel", "torch"]
    b = of(raised)
    assert b is not None and (b.caller, b.callee, b.member) == ("liger-kernel", "transformers", "language_model"), b


def test_the_long_report_takes_its_raising_frame_from_the_line_after_the_message() -> None:
    scan = scan_text(LONG.encode())
    (raised,) = scan.raised
    assert raised.type == "TypeError" and "cache_position" in raised.value
    assert [(f.path.rsplit("/", 1)[-1], f.line) for f in raised.frames] == [("test_generate.py", 42), ("peft_model.py", 1910)]
    b = of(raised)
    assert b is not None and (b.caller, b.callee) == ("peft", "transformers"), b
