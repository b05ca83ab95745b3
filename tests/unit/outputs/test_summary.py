"""The terminal summary read at 80 columns (as under nox, which is not a TTY): nothing cut, findings first."""

from __future__ import annotations

import io

from records_factory import make_record
from rich.console import Console

from envmatrix.outputs.summary import letters, print_summary, short
from envmatrix.records.record import Record

HEALTHY = ["fp32-sdpa", "fp32-eager", "bf16-sdpa", "lora-ckpt", "ddp2", "frozen-emb-reentrant"]
CONTROLS = {
    "ctl-zero-grad": "zero_grad",
    "ctl-nan": "nan_loss",
    "ctl-ddp-ready-twice": "ddp_ready_twice",
    "ctl-grad-lost": "grad_lost",
    "ctl-garbled": "garbled_output",
    "ctl-sigfpe": "sigfpe",
}


def cpu_profile(broken_control: bool = False) -> list[Record]:
    records = []
    for tf in ("4.51.3", "4.57.6", "5.23.0"):
        common = {"transformers": tf, "torch": "2.13.0", "cuda": "none", "gpu": "cpu"}
        for s in HEALTHY:
            outcome = "grad_lost" if s == "frozen-emb-reentrant" and tf != "5.23.0" else "ok"
            records.append(make_record(outcome, scenario=s, evidence="model.embed_tokens.weight got no gradient", **common))
        for s, expect in CONTROLS.items():
            outcome = "ok" if broken_control and s == "ctl-sigfpe" and tf == "5.23.0" else expect
            records.append(make_record(outcome, scenario=s, expect=expect, **common))
    return records


def render(records: list[Record], width: int = 80) -> str:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    print_summary(console, records, results_dir="reports/results")
    return console.export_text()


def test_cpu_profile_fits_80_columns_with_every_label_whole() -> None:
    text = render(cpu_profile())
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = [line for line in lines if line.startswith(("4.51.3", "4.57.6", "5.23.0")) and "✓" in line]
    assert len(rows) == 3  # rows labelled by the one varying axis, not the full environment id
    assert all("cpu-torch" not in row for row in rows)
    key = "\n".join(lines[next(i for i, line in enumerate(lines) if line.startswith("key:")) :])
    for i, s in enumerate([*HEALTHY, *CONTROLS]):
        assert f"{letters(i)} {s}" in key.splitlines()[0] or any(f"{letters(i)} {s}" in line for line in key.splitlines())  # never split
    assert "✗GL" in rows[0] and "✗GL" not in rows[2]
    flat = " ".join(text.split())
    first_finding = flat.index("frozen-emb-reentrant (cpu): grad_lost on transformers 4.51.3, 4.57.6; ok on 5.23.0")
    assert first_finding < flat.index("key:")  # findings first
    assert "18/18 controls reproduced" in text


def test_a_control_that_did_not_reproduce_is_loud() -> None:
    text = render(cpu_profile(broken_control=True))
    assert "17/18 controls reproduced" in text
    assert "control NOT reproduced" in text and "ctl-sigfpe expected sigfpe, got ok" in " ".join(text.split())
    assert "!OK" in text


def test_a_wide_matrix_falls_back_to_one_line_per_environment() -> None:
    records = [
        make_record(outcome, scenario=f"scenario-number-{i}", torch=torch, transformers=tf, flash_attn=fa, gpu=gpu, cuda=cuda)
        for i in range(14)
        for torch, cuda in (("2.6.0", "12.4"), ("2.8.0", "12.8"))
        for tf in ("4.51.3", "4.57.6")
        for fa in ("none", "2.8.3")
        for gpu in ("A100", "H20")
        for outcome in (("sigfpe" if gpu == "H20" and torch == "2.6.0" and i == 3 else "ok"),)
    ]
    text = render(records)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "key:" not in text  # no table: it would not fit
    for env in {r.env for r in records}:
        assert f"{env}: " in text  # each environment's full id on its own line, whole
    assert "scenario-number-3 (H20): sigfpe on cuda 12.4; ok on 12.8" in text.replace("\n", "")
    wide = render(records, width=200)
    assert "key:" in wide  # a wide terminal gets the table


def test_codes_and_letters() -> None:
    assert [short(c) for c in ("grad_lost", "ddp_ready_twice", "oom", "sigfpe")] == ["GL", "DRT", "OOM", "SIG"]
    assert [letters(i) for i in (0, 25, 26)] == ["A", "Z", "AA"]
