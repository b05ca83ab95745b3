"""Chat templates render in a sandbox (a forked child with time, memory and output limits): a good template
renders as transformers renders it; a loop, a runaway string, an include, an escape are bad input naming the
template and why, and never reach the probe itself."""

from __future__ import annotations

from typing import Any

import pytest

from probes import chat, families, untrusted
from probes.record import ProbeInputError

PROMPTS = ["Add 2 and 3:", "Say hi:"]
GOOD = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"


def tokenizer_with(template: str) -> Any:
    tok = families.build_tokenizer()
    tok.chat_template = template
    return tok


def test_a_good_template_renders_as_transformers_does() -> None:
    tok = tokenizer_with(GOOD)
    got = chat.render(tok, PROMPTS, "t.jinja")
    assert got == [tok.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True) for p in PROMPTS]
    assert got[0] == "<|user|>Add 2 and 3:<|assistant|>"


@pytest.mark.parametrize(
    ("template", "said"),
    [
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "still renders after 5 s (a loop without end?)"),
        ("{{ 'x' * 10000000000 }}", "a constant expression comes to more than 1 MiB"),
        ("{{ 'x' * 100000 * 100 }}", "a constant expression comes to more than 1 MiB"),
        ("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}", "needs more than 256 MiB"),
        ("{{ 'x'|center(2000000000) }}", "needs more than 256 MiB"),
        ("{{ 'x' * 1000000 }}", "renders 2,000,000 characters"),
        ("{% include '/etc/passwd' %}", "includes or imports another template"),
        ("{% import 'os' as os %}", "includes or imports another template"),
        ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "the sandbox stopped it: SecurityError: access to attribute '__class__'"),
        ("{{ cycler.__init__.__globals__.os.popen('id').read() }}", "the sandbox stopped it"),
        ("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "cannot be used: it calls itself without end"),
        ("{% for %}", "not a valid Jinja template"),
        ("{{ raise_exception('roles must alternate') }}", "fails on a single user turn: TemplateError: roles must alternate"),
    ],
    ids=[
        "loop",
        "huge-string",
        "huge-literal",
        "doubling",
        "center",
        "big-output",
        "include",
        "import",
        "escape",
        "escape-globals",
        "recursion",
        "syntax",
        "raises",
    ],
)
def test_a_template_the_sandbox_refuses_is_bad_input_naming_it(template: str, said: str) -> None:
    with pytest.raises(chat.TemplateRefused) as caught:
        chat.render(tokenizer_with(template), PROMPTS, "/models/x/chat_template.jinja")
    message = str(caught.value)
    assert message.startswith("/models/x/chat_template.jinja: the chat template") and said in message, message
    assert isinstance(caught.value, ProbeInputError) and caught.value.exit_code == 2 and "\n" not in message


def test_the_probe_renders_once_and_uses_the_sandboxs_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    tok = tokenizer_with(GOOD)
    calls: list[int] = []
    real = chat.render

    def counted(*args: Any) -> list[str]:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(chat, "render", counted)
    first, templated = families.format_prompts(tok, PROMPTS)
    again, _ = families.format_prompts(tok, PROMPTS)
    assert templated and first == again and len(calls) == 1
    assert families.format_prompts(families.build_tokenizer(), PROMPTS) == (PROMPTS, False)  # no template: as they are


def test_the_limits_are_the_bounds_owners() -> None:
    assert untrusted.TEMPLATE_SECONDS <= 10 and untrusted.TEMPLATE_MEMORY <= 512 << 20 and untrusted.TEMPLATE_OUTPUT_CHARS <= 1 << 20


def test_a_huge_literal_is_refused_before_anything_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_fork() -> int:
        raise AssertionError("forked: the literal was not bounded before rendering")

    monkeypatch.setattr(chat.os, "fork", no_fork)
    for template in ("{{ 'abcd' * 900000000 }}", "{% set s = 'x' * 10**9 %}{{ s|length }}", "{{ ['a', 'b'] * 10**8 }}"):
        with pytest.raises(chat.TemplateRefused, match="a constant expression comes to more than"):
            chat.render(tokenizer_with(template), PROMPTS, "t.jinja")
    assert chat.literal_problem("{% for m in messages %}{{ m.content * 3 }}{{ '-' * 40 }}{% endfor %}") is None
