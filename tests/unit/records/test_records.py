"""The typed record: round trip, the previous version's files, the published schema, untrusted files."""

from __future__ import annotations

import copy
import json
import os
import random
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from records_factory import make_record

from envmatrix.records.record import RECORD_VERSION, SCHEMA_PATH, Record, RecordError, json_schema, load_records, read_record, write_record

V1 = Path(__file__).resolve().parents[2] / "data" / "records-v1"


def v1_files() -> list[Path]:
    files = sorted(V1.glob("*.json"))
    assert files, f"no version-1 fixtures in {V1}"
    return files


def test_round_trip() -> None:
    for rec in (make_record("ok"), make_record("zero_grad", scenario="ctl", expect="zero_grad"), make_record("skipped")):
        assert Record.from_json(json.loads(json.dumps(rec.to_json()))) == rec


def test_version_1_records_written_by_envmatrix_0_1_still_load() -> None:
    """The fixtures were written by the previous runner (commit 46fafed) for two real cells."""
    recs = {r.cell.scenario: r for r in (read_record(p) for p in v1_files())}
    assert recs["fp32-sdpa"].klass == "ok" and recs["fp32-sdpa"].version == 1
    assert recs["ctl-zero-grad"].control == "reproduced" and recs["ctl-zero-grad"].expect == "zero_grad"
    assert recs["fp32-sdpa"].steps_completed == 4 and recs["fp32-sdpa"].metric("grad_norm")[0] > 0
    assert recs["fp32-sdpa"].env_facts is not None and recs["fp32-sdpa"].env_facts["transformers"] == "4.57.6"
    old = json.loads(v1_files()[0].read_text())
    skipped = {k: old[k] for k in ("record_version", "cell", "inputs", "backend", "runner", "started")}  # v1's skipped layout
    skipped.update(
        status="skipped",
        finished=old["finished"],
        control=None,
        outcome={"class": "skipped", "evidence": "no wheel", "remedy": "", "rule": "catalog", "also": []},
    )
    assert Record.from_json(skipped).klass == "skipped"


def test_newer_and_older_versions_say_so() -> None:
    data = make_record("ok").to_json()
    with pytest.raises(RecordError, match="newer envmatrix"):
        Record.from_json({**data, "record_version": RECORD_VERSION + 1})
    with pytest.raises(RecordError, match="too old"):
        Record.from_json({**data, "record_version": 0})
    with pytest.raises(RecordError, match="not an envmatrix record"):
        Record.from_json({"cell": {}})


def test_published_schema_is_current_and_records_match_it() -> None:
    assert json.loads(SCHEMA_PATH.read_text()) == json_schema(), "record.schema.json is stale: python -m envmatrix.records.record > record.schema.json"
    validator = jsonschema.Draft202012Validator(json_schema())
    for rec in (make_record("ok"), make_record("skipped"), make_record("sigfpe", expect="sigfpe")):
        validator.validate(rec.to_json())
    bad = make_record("ok").to_json()
    bad["outcome"]["class"] = "fine"
    assert list(validator.iter_errors(bad))


# ---- hostile record files -------------------------------------------------------------------------

MUTATIONS: list[tuple[str, Any]] = [
    ("outcome", None),
    ("outcome", {"evidence": "x"}),
    ("cell", None),
    ("cell", "cpu/x"),
    ("status", 5),
    ("status", "great"),
    ("metrics", "lots"),
    ("metrics", [1, 2]),
    ("exit_code", "0"),
    ("exit_code", 1.5),
    ("gpu_ids", [True]),
    ("control", "maybe"),
    ("record_version", "2"),
    ("timings", []),
]
CELL_MUTATIONS: list[tuple[str, Any]] = [
    ("id", "../../etc/passwd"),
    ("id", "a/b/c"),
    ("env", "cpu-env\nmalicious line"),
    ("env", "../escape"),
    ("torch", "2.6.0\n"),
    ("torch", "2.6.0; rm -rf /"),
    ("torch", 2.6),
    ("scenario", None),
    ("expect", "anything"),
]
BUILD_MUTATIONS: list[tuple[str, Any]] = [
    ("index_url", "--trusted-host evil"),
    ("find_links", ["https://evil.example/x\n--index-url http://evil"]),
    ("freeze", "six==1.16.0"),
    ("build_args", {"A": 1}),
]


@pytest.mark.parametrize(
    ("where", "key", "value"), [("top", *m) for m in MUTATIONS] + [("cell", *m) for m in CELL_MUTATIONS] + [("build", *m) for m in BUILD_MUTATIONS]
)
def test_malformed_records_are_refused_with_the_field(where: str, key: str, value: Any) -> None:
    data = make_record("ok").to_json()
    target = {"top": data, "cell": data["cell"], "build": data["environment"]["build"]}[where]
    target[key] = value
    with pytest.raises(RecordError) as err:
        Record.from_json(data, "x.json")
    assert str(err.value).startswith("x.json: ")


def test_random_corruption_never_escapes_as_another_error() -> None:
    """Generated damage: every value replaced at random by values of other types. Only RecordError."""
    rng = random.Random(7)
    base = make_record("ok").to_json()
    junk: list[Any] = [None, 0, -1, 1e308, "", "x" * 300, [], {}, [None], {"a": []}, True, "../x", "a\nb"]
    refused = 0
    for _ in range(400):
        data = copy.deepcopy(base)
        node: Any = data
        path = []
        while isinstance(node, dict) and node:
            key = rng.choice(sorted(node))
            path.append(key)
            if not isinstance(node[key], dict) or rng.random() < 0.4:
                node[key] = rng.choice(junk)
                break
            node = node[key]
        try:
            Record.from_json(data)
        except RecordError:
            refused += 1
    assert refused > 100


def test_load_records_skips_bad_files_with_a_warning(tmp_path: Path) -> None:
    good = make_record("ok")
    write_record(tmp_path / "good.json", good)
    (tmp_path / "torn.json").write_text('{"record_version": 2, "cell": ')
    (tmp_path / "list.json").write_text("[1, 2]")
    bad = good.to_json()
    bad["cell"]["env"] = "../../x"
    (tmp_path / "evil.json").write_text(json.dumps(bad))
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    os.symlink("/dev/zero", tmp_path / "zero.json")
    os.mkfifo(tmp_path / "fifo.json")
    warnings: list[str] = []
    records = load_records(tmp_path, warn=warnings.append)
    assert records == [good]
    assert len(warnings) == 6, warnings
    joined = "\n".join(warnings)
    for name in ("torn.json", "list.json", "evil.json", "deep.json", "zero.json", "fifo.json"):
        assert name in joined


# ---- the wrong-GPU guard ---------------------------------------------------------------------------


def test_a_record_faked_onto_another_gpu_is_never_ok() -> None:
    faked = make_record("ok", gpu="H20", seen_gpu="A100")  # ran on an A100, claims H20
    loaded = Record.from_json(faked.to_json())
    assert loaded.klass == "wrong_gpu" and "A100" in loaded.outcome.evidence and "H20" in loaded.outcome.evidence
    on_cpu = Record.from_json(make_record("ok", gpu="H100", seen_gpu="cpu").to_json())
    assert on_cpu.klass == "wrong_gpu" and "ran on cpu" in on_cpu.outcome.evidence
    silent = make_record("ok", gpu="A100").to_json()
    silent["environment"]["facts"] = None
    assert Record.from_json(silent).klass == "wrong_gpu"  # cannot say where it ran: not ok
    control = Record.from_json(make_record("zero_grad", gpu="H20", expect="zero_grad", seen_gpu="A100").to_json())
    assert control.klass == "wrong_gpu" and control.control == "not reproduced"
    assert Record.from_json(make_record("ok", gpu="H20").to_json()).klass == "ok"


def test_wrong_gpu_records_are_not_vetted_and_show_in_the_report(tmp_path: Path) -> None:
    from envmatrix.outputs.report import write_report
    from envmatrix.outputs.vetting import vetted_environments

    write_record(tmp_path / "r" / "faked.json", make_record("ok", gpu="H20", seen_gpu="A100"))
    records = load_records(tmp_path / "r")
    assert [r.klass for r in records] == ["wrong_gpu"] and vetted_environments(records) == []
    html = write_report([tmp_path / "r"], tmp_path / "out")["html"].read_text()
    assert 'data-outcome="wrong_gpu"' in html and "not on the H20" in html
