"""Report rendering from fixture records, escaping, flat results, merging and vetting."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from records_factory import make_record
from rich.console import Console

from envmatrix.outputs.report import render_html, write_report
from envmatrix.outputs.summary import compact_table
from envmatrix.outputs.vetting import best, failing_everywhere, required, vetted_environments
from envmatrix.records.outcomes import OUTCOME_NAMES
from envmatrix.records.record import Record, cell_stem, write_record

EVIL = "<script>alert('pwned')</script>"


def every_class() -> list[Record]:
    return [make_record(name, scenario=f"s-{name}") for name in OUTCOME_NAMES]


def test_html_shows_every_class_and_escapes_logs() -> None:
    records = every_class()
    records.append(make_record("error", scenario="evil", evidence=f"line 1: {EVIL}", log_tail=f"{EVIL}\n</script><b>x</b>"))
    html = render_html(records)
    for name in OUTCOME_NAMES:
        assert f'data-outcome="{name}"' in html
    assert EVIL not in html and "</script><b>" not in html
    assert "&lt;script&gt;alert(" in html  # the evidence in a title attribute, as text
    assert "\\u003cscript\\u003e" in html  # the log tail in the JSON blob, inert
    assert "http://" not in html and "https://" not in html  # self-contained: nothing to fetch


def test_flags_failed_controls_and_lists_vetted() -> None:
    records = [
        make_record("ok", scenario="healthy"),
        make_record("zero_grad", scenario="ctl-zero-grad", expect="zero_grad"),
        make_record("ok", scenario="healthy", transformers="4.57.6"),
        make_record("ok", scenario="ctl-zero-grad", expect="zero_grad", transformers="4.57.6"),
    ]
    html = render_html(records)
    assert 'id="failed-controls"' in html and "expected zero_grad, got ok" in html
    vetted = vetted_environments(records)
    assert [v.cell.transformers for v in vetted] == ["4.51.3"]
    listed = html.split('id="vetted"')[1]
    # both environments share one detector stack (plan/vetrule.py): 4.51.3's control vets it, but the control that
    # failed in 4.57.6 says the detector is broken there, so 4.57.6 stays unvetted
    assert "cu124-torch2.6.0-tf4.51.3-fanone-a100-py3.11 — vetted for healthy; controls 1/1 reproduced" in listed
    assert "cu124-torch2.6.0-tf4.57.6-fanone-a100-py3.11 — vetted for nothing: no control reproduced on its detector stack (1 ran here)" in listed


CTL = {"scenario": "ctl", "expect": "zero_grad"}


def test_vetted_for_the_scenarios_ok_and_only_on_a_reproduced_control() -> None:
    ok, ctl = make_record("ok"), make_record("zero_grad", **CTL)  # type: ignore[arg-type]
    assert not vetted_environments([ok])  # no detector proven here: vetted for nothing
    (v,) = vetted_environments([ok, ctl, make_record("nan_loss", scenario="bf16")])
    assert v.scenarios == ("fp32-sdpa",) and v.fails == ("bf16",) and (v.controls, v.controls_ran) == (1, 1)
    assert not vetted_environments([make_record("skipped"), ctl])  # nothing healthy ran
    assert not vetted_environments([make_record("nan_loss"), ctl])


def test_a_drift_control_trains_but_vets_nothing() -> None:
    ok, ctl = make_record("ok"), make_record("zero_grad", **CTL)  # type: ignore[arg-type]
    drift = make_record("ok", scenario="ctl-drift")
    drift = replace(drift, cell=replace(drift.cell, scenario_settings={"fault": "drift"}))
    assert not drift.workload and ok.workload and not ctl.workload
    (v,) = vetted_environments([ok, ctl, drift])
    assert v.scenarios == ("fp32-sdpa",)  # the drift control ran ok, yet it stands for no workload
    assert required([ok, ctl, drift], "A100") == ["fp32-sdpa"]


def test_a_scenario_failing_everywhere_is_a_finding_not_a_veto() -> None:
    records = []
    for tf in ("4.51.3", "4.57.6"):
        records += [make_record("ok", transformers=tf), make_record("garbled_output", scenario="gemma2", transformers=tf)]
        records.append(make_record("zero_grad", transformers=tf, **CTL))  # type: ignore[arg-type]
    assert failing_everywhere(records) == {"A100": ["gemma2"]}
    assert len(vetted_environments(records)) == 2
    choice, wanted, _ = best(records, "A100")
    assert wanted == ["fp32-sdpa"] and choice is not None and choice.cell.transformers == "4.57.6"
    html = render_html(records)
    assert 'id="fails-everywhere-A100"' in html and "gemma2 failed in every environment" in html


def test_best_picks_the_newest_environment_vetted_for_the_workload() -> None:
    old = [make_record("ok"), make_record("ok", scenario="lora"), make_record("zero_grad", **CTL)]  # type: ignore[arg-type]
    newer = [make_record("ok", torch="2.7.1", cuda="12.8"), make_record("zero_grad", torch="2.7.1", cuda="12.8", **CTL)]  # type: ignore[arg-type]
    newer.append(make_record("grad_lost", scenario="lora", torch="2.7.1", cuda="12.8"))
    other_gpu = [make_record("ok", torch="2.8.0", cuda="12.8", gpu="H20"), make_record("zero_grad", torch="2.8.0", cuda="12.8", gpu="H20", **CTL)]  # type: ignore[arg-type]
    records = old + newer + other_gpu
    choice, wanted, reasons = best(records, "A100")  # default: fp32-sdpa and lora (lora is ok in one environment)
    assert wanted == ["fp32-sdpa", "lora"] and choice is not None and choice.cell.torch == "2.6.0"
    assert reasons == {"cu128-torch2.7.1-tf4.51.3-fanone-a100-py3.11": ["lora fails here"]}
    choice, _, _ = best(records, "A100", ["fp32-sdpa"])
    assert choice is not None and choice.cell.torch == "2.7.1"
    assert best(records, "B200")[0] is None


def test_not_applicable_scenarios_are_not_asked_of_an_environment_unless_named() -> None:
    base = [make_record("ok"), make_record("skipped", scenario="trl-grpo", rule="needs,excluded"), make_record("zero_grad", **CTL)]  # type: ignore[arg-type]
    choice, wanted, _ = best(base, "A100")
    assert choice is not None and wanted == ["fp32-sdpa"]
    choice, _, reasons = best(base, "A100", ["trl-grpo"])
    assert choice is None and reasons == {"cu124-torch2.6.0-tf4.51.3-fanone-a100-py3.11": ["trl-grpo does not apply here"]}
    compat = [*base[:1], make_record("skipped", scenario="bf16", rule="catalog"), base[2]]
    assert best(compat, "A100", ["bf16"])[2] == {"cu124-torch2.6.0-tf4.51.3-fanone-a100-py3.11": ["bf16 did not run here"]}


def test_vetted_json_beside_the_report(tmp_path: Path) -> None:
    results = tmp_path / "results"
    records = [make_record("ok"), make_record("zero_grad", **CTL), make_record("ok", transformers="4.57.6"), make_record("ok", gpu="H20")]  # type: ignore[arg-type]
    for rec in records:
        write_record(results / f"{cell_stem(rec.id)}.json", rec)
    paths = write_report([results], tmp_path / "out")
    doc = json.loads(paths["vetted"].read_text())
    # 4.57.6 ran no control but shares the A100 detector stack 4.51.3's control reproduced on: vetted by it;
    # the H20 environment's stack (another GPU type) has no control: not vetted, not listed
    assert [e["env"][-22:] for e in doc["vetted"]] == ["tf4.51.3-fanone-a100-py3.11"[-22:], "tf4.57.6-fanone-a100-py3.11"[-22:]]
    assert all(e["scenarios"] == ["fp32-sdpa"] and e["vetted_by"] == [records[1].cell.id] for e in doc["vetted"])
    assert [e["controls"] for e in doc["vetted"]] == [1, 0]  # its own controls: 4.57.6 ran none, a neighbour vets it


def test_results_merge_from_two_runners(tmp_path: Path) -> None:
    a100, h20 = tmp_path / "a100", tmp_path / "h20"
    for folder, gpu in ((a100, "A100"), (h20, "H20")):
        for rec in (make_record("ok", gpu=gpu), make_record("sigfpe", gpu=gpu, scenario="bf16")):
            write_record(folder / f"{cell_stem(rec.id)}.json", rec)
    (a100 / "torn.json").write_text("{ not json")
    paths = write_report([a100, h20], tmp_path / "out")
    frame = pd.read_csv(paths["csv"])
    assert len(frame) == 4 and set(frame["gpu"]) == {"A100", "H20"}
    assert set(frame["class"]) == {"ok", "sigfpe"}
    rows = json.loads(paths["json"].read_text())
    assert {r["id"] for r in rows} == set(frame["id"])
    html = paths["html"].read_text()
    assert 'data-gpu="A100"' in html and 'data-gpu="H20"' in html
    assert html.count('class="cell') == 4


def cpu_shape(ctl: str = "zero_grad") -> list[Record]:
    records = []
    for tf in ("4.51.3", "4.57.6", "5.23.0"):
        common = {"transformers": tf, "torch": "2.13.0", "cuda": "none", "gpu": "cpu"}
        records.append(make_record("ok", scenario="fp32-sdpa", **common))
        frozen = "grad_lost" if tf != "5.23.0" else "ok"
        records.append(make_record(frozen, scenario="frozen-emb-reentrant", evidence=f"no gradient {EVIL}", **common))
        records.append(make_record(ctl if tf == "5.23.0" else "zero_grad", scenario="ctl-zero-grad", expect="zero_grad", **common))
    return records


def test_findings_come_first_and_reproduced_controls_are_quiet() -> None:
    html = render_html(cpu_shape())
    findings, rest = html.index('id="findings"'), html.index('id="vetted"')
    assert findings < rest < html.index('id="matrix"')
    block = html[findings:rest]
    assert "frozen-emb-reentrant (cpu)" in block and '<span class="axis">transformers</span> 4.51.3, 4.57.6; ok on 5.23.0' in block
    assert "3/3 controls reproduced" in block and 'id="failed-controls"' not in html
    assert "no gradient &lt;script&gt;" in block and EVIL not in html  # findings are escaped like the rest
    quiet = [line for line in html.splitlines() if 'class="cell control quiet"' in line]
    assert len(quiet) == 3
    assert "failedcontrol" not in html.split('id="matrix"')[1].split("<h2>Legend")[0]


def test_a_control_that_did_not_reproduce_is_loud() -> None:
    html = render_html(cpu_shape(ctl="ok"))
    block = html[html.index('id="findings"') : html.index('id="vetted"')]
    assert "2/3 controls reproduced" in block and 'class="warn" id="controls-line"' in block
    assert 'id="failed-controls"' in block and "expected zero_grad, got ok" in block
    assert html.count("control failedcontrol") == 1 and html.count("control quiet") == 2


def test_since_marks_changed_cells_first(tmp_path: Path) -> None:
    old, new = tmp_path / "old", tmp_path / "new"
    before = cpu_shape()
    after = [
        make_record("nan_loss", scenario="fp32-sdpa", transformers="5.23.0", torch="2.13.0", cuda="none", gpu="cpu")
        if r.cell.scenario == "fp32-sdpa" and r.cell.transformers == "5.23.0"
        else r
        for r in before
    ]
    for folder, recs in ((old, before), (new, after)):
        for rec in recs:
            write_record(folder / f"{cell_stem(rec.id)}.json", rec)
    html = write_report([new], tmp_path / "out", since=[old])["html"].read_text()
    block = html[html.index('id="findings"') : html.index('id="vetted"')]
    changed = block.index("changed since the earlier run: cpu-torch2.13.0-tf5.23.0-fanone-cpu-py3.11/fp32-sdpa: ok → nan_loss")
    assert changed < block.index("frozen-emb-reentrant (cpu)")


def test_report_command_since(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from envmatrix.cli import main

    old, new = tmp_path / "old", tmp_path / "new"
    write_record(old / "a.json", make_record("ok", transformers="4.57.6"))
    write_record(new / "a.json", make_record("grad_lost", transformers="4.57.6"))
    write_record(new / "b.json", make_record("ok", transformers="5.23.0"))
    assert main(["report", "--results", str(new), "--since", str(old), "--out", str(tmp_path / "out")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.index("changed: cu124-torch2.6.0-tf4.57.6-fanone-a100-py3.11/fp32-sdpa: ok → grad_lost") < out.index("fp32-sdpa (A100): grad_lost on")
    assert main(["report", "--results", str(new), "--since", str(tmp_path / "nowhere")]) == 2
    assert "no such results folder" in capsys.readouterr().err


def test_not_applicable_cells_are_folded_and_compatibility_skips_stay() -> None:
    records = [
        make_record("ok"),
        make_record("skipped", scenario="trl-grpo", rule="needs,excluded", evidence="trainer: trl needs the trl package"),
        make_record("skipped", scenario="bf16-fa2", rule="catalog", evidence="no flash-attn wheel"),
    ]
    html = render_html(records)
    assert 'class="fold">1 scenario run; 1 not applicable' in html and 'id="na-count">not applicable (folded): 1' in html
    assert 'data-outcome="not_applicable"' in html and 'data-outcome="skipped"' in html  # the compatibility skip stays visible
    assert 'id="f-na"' in html  # the filter still shows them
    table, _ = compact_table(records)
    console = Console(width=200, record=True)
    console.print(table)
    row = console.export_text().splitlines()[-1]
    assert "·" in row and row.rstrip().endswith("1")  # the catalog skip drawn, the n/a one blank and counted
