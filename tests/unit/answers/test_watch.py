"""watch's decisions over outcomes (pure), and its runs with a fake Runner: what is tried, what counts as broken,
what is bisected, the upgrade order, and that recorded cells are never run again."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from records_factory import make_record

from envmatrix.answers import watch_run
from envmatrix.answers.watch import Try, affects, changed, order_text
from envmatrix.answers.watch_run import WatchRequest, baseline_environment, run_watch
from envmatrix.answers.watch_summary import as_json, markdown
from envmatrix.errors import BackendError, InputError
from envmatrix.facts.releases import Listing, Release
from envmatrix.plan.cells import Cell, Environment
from envmatrix.records.record import Record, cell_info, write_record
from envmatrix.spec.matrix import Scenario, Spec, load

MATRIX = """\
version: 1
profiles:
  stack:
    cuda: [none]
    torch: [2.13.0]
    transformers: [4.51.3]
    flash_attn: [none]
    gpu: [cpu]
    python: ["3.11"]
    packages: {trl: [0.18.2], accelerate: [1.2.1]}
    scenarios: [trl-grpo, trl-ctl-zero-grad, fp32-sdpa]
scenarios:
  trl-grpo: {trainer: trl}
  trl-ctl-zero-grad: {trainer: trl, temperature: 0.01, top_p: 0.001, expect: zero_grad}
  fp32-sdpa: {}
"""


def test_affects_and_changed() -> None:
    trl, builtin = Scenario("t", trainer="trl"), Scenario("b")
    assert affects("transformers", builtin, "cpu") and affects("trl", trl, "cpu") and affects("accelerate", trl, "cpu")
    assert not affects("trl", builtin, "cpu") and not affects("deepspeed", trl, "cpu") and affects("datasets", builtin, "cpu"), (
        "an unknown package may matter to any scenario"
    )
    ok, err = _rec("trl-grpo", "ok"), _rec("trl-grpo", "error")
    assert changed(ok, err) is True and changed(err, ok) is False and changed(ok, ok) is None
    assert changed(ok, _rec("trl-grpo", "build_failed")) is None, "a cell that could not be made says nothing"
    ctl = _rec("trl-ctl-zero-grad", "zero_grad", expect="zero_grad")
    assert changed(ctl, _rec("trl-ctl-zero-grad", "ok", expect="zero_grad")) is True, "a control that stops reproducing broke"


def test_order_text() -> None:
    first = Try({"transformers": "5.24.0", "accelerate": "1.15.0"}, "ok", {"accelerate": "ok"})
    text, works = order_text("transformers", "trl-grpo", [first], None)
    assert works and text == "Move accelerate to 1.15.0 first (trl-grpo trains with it on the baseline); then transformers 5.24.0 trains"
    both = Try(
        {"transformers": "5.24.0", "trl": "1.16.0", "accelerate": "1.15.0"},
        "ok",
        {"trl": "cannot install: trl 1.16.0 requires accelerate>=1.10.1", "accelerate": "ok"},
    )
    text, _ = order_text("transformers", "trl-grpo", [both, Try({"transformers": "5.24.0", "peft": "1.0"}, "error", {"peft": "ok"})], None)
    assert text == (
        "Move accelerate to 1.15.0 first (trl-grpo trains with it on the baseline); then move transformers to 5.24.0 together with trl 1.16.0 "
        "(trl 1.16.0 on the baseline: cannot install: trl 1.16.0 requires accelerate>=1.10.1); together they train"
    )
    none, works = order_text("transformers", "trl-grpo", [Try({"transformers": "5.24.0", "trl": "1.16.0"}, "error", {})], "error")
    assert not works and none == "No upgrade order found (transformers 5.24.0 + trl 1.16.0 (error)): stay on the lock"


def _rec(scenario: str, klass: str, expect: str | None = None, env: Environment | None = None) -> Record:
    env = env or Environment("none", "2.13.0", "4.51.3", "none", "cpu", "3.11")
    return from_cell(klass, Cell(env, Scenario(scenario, expect=expect)))


def from_cell(klass: str, cell: Cell) -> Record:
    """A record of `klass` for a cell, as the runner writes one."""
    record = make_record(klass, scenario=cell.scenario.name, expect=cell.scenario.expect, gpu="cpu", cuda="none")
    return dataclasses.replace(record, cell=cell_info(cell))


# ---- the runs, with a Runner that answers from a table instead of building venvs ----------------------


class FakeRunner:
    """Outcome by environment: transformers ≥ 4.53 breaks TRL unless trl ≥ 1.0; a counter of cells run."""

    def __init__(self, results: Path, probe_source: bytes = b"probe") -> None:
        self.results = results
        self.probe_source = probe_source
        self.backend = type("B", (), {"name": "venv"})()
        self.runs: list[str] = []

    def record_path(self, cell_id: str) -> Path:
        from envmatrix.records.record import cell_stem

        return self.results / f"{cell_stem(cell_id)}.json"

    def run(self, cells: list[Cell]) -> Any:
        from envmatrix.records.record import inputs_hash

        records = []
        for cell in cells:
            self.runs.append(cell.id)
            klass = "skipped" if cell.status == "skipped" else outcome(cell)
            record = dataclasses.replace(from_cell(klass, cell), inputs=inputs_hash(cell, self.probe_source, "venv"))
            write_record(self.record_path(cell.id), record)
            records.append(record)
        return type("R", (), {"records": records, "ran": len(records), "cached": 0})()


def outcome(cell: Cell) -> str:
    tf, trl = cell.env.transformers.split("."), cell.env.package("trl")
    if cell.scenario.trainer != "trl":
        return "ok"
    broken = (int(tf[0]), int(tf[1])) >= (4, 53) and trl.startswith("0.")
    if cell.scenario.expect:
        return "error" if broken else cell.scenario.expect
    return "missing_module" if (int(tf[0]) >= 5 and broken) else "error" if broken else "ok"


INDEX = {
    "transformers": ["4.51.3", "4.52.0", "4.52.4", "4.53.0", "4.54.0", "4.57.6", "5.0.0", "5.1.0", "5.24.0"],
    "trl": ["0.18.2", "0.19.1", "1.16.0"],
    "accelerate": ["1.2.1", "1.15.0"],
    "torch": [],
}


@pytest.fixture
def watched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Spec, WatchRequest, FakeRunner]:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX)
    runner = FakeRunner(tmp_path / "reports" / "results")
    runner.results.mkdir(parents=True)

    def listing(name: str, settings: Any = None, *, local: str | None = None, extra: Any = ()) -> Listing:
        found = Listing(name, asked=["https://index.example/simple"])
        for v in INDEX[name]:
            found.releases[v] = Release(v, python_tags={"py3"})
        return found

    monkeypatch.setattr(watch_run, "list_releases", listing)
    monkeypatch.setattr(WatchRequest, "runner", lambda self, profile, console: runner)
    request = WatchRequest(profile="stack", gpu="cpu", backend="venv", reports=tmp_path / "reports", venvs=tmp_path / "venvs", base=tmp_path)
    return load(path), request, runner


def test_watch_finds_the_break_bisects_it_and_the_order(watched: tuple[Spec, WatchRequest, FakeRunner]) -> None:
    from rich.console import Console

    spec, request, runner = watched
    w = run_watch(spec, request, Console(quiet=True))
    assert w.exit_code() == 1
    reg = next(r for r in w.broken if r.axis == "transformers")
    assert reg.scenario == "trl-grpo" and reg.bisection is not None
    assert (reg.bisection.before, reg.bisection.first) == ("4.52.4", "4.53.0")
    assert reg.bisection.kinds == [("4.53.0", "error"), ("5.0.0", "missing_module")]
    order = next(o for o in w.orders if o.axis == "transformers")
    assert order.works and order.text.startswith(
        "Move accelerate to 1.15.0 first (trl-grpo trains with it on the baseline); then move transformers to 5.24.0 together with trl 1.16.0 ("
    ), order.text
    assert "trl 1.16.0 on the baseline: cannot install: trl 1.16.0 requires accelerate>=1.10.1" in order.text, "its wheel's metadata says why not first"
    trl = next(a for a in w.axes if a.axis == "trl")
    assert trl.newest is None and trl.latest == "1.16.0" and "requires accelerate>=1.4.0" in trl.ruled_out["0.19.1"], "ruled out by its wheel's metadata"
    assert any(c.endswith("-accelerate1.15.0-trl0.18.2-cpu-py3.11/trl-grpo") for c in runner.runs)
    assert not any(c.endswith("-accelerate1.15.0-trl0.18.2-cpu-py3.11/fp32-sdpa") for c in runner.runs), "an accelerate release never re-runs the built-in loop"
    text = markdown(w, reports="reports")
    assert "first release where it changes: **transformers 4.53.0** (error); 4.52.4 before it shows ok" in text
    assert "then missing_module from transformers 5.0.0" in text and "then move transformers to 5.24.0 together with trl 1.16.0 (" in text
    assert "torch==2.13.0+cpu transformers==4.51.3 accelerate==1.2.1 trl==0.18.2" in text
    data = as_json(w, reports="reports")
    assert data["exit_code"] == 1 and data["regressions"][0]["bisection"]["first"] == "4.53.0"
    ran = len(runner.runs)
    again = run_watch(spec, request, Console(quiet=True))
    assert len(runner.runs) == ran and again.ran == 0, "an unchanged second watch runs nothing"
    assert markdown(again, reports="reports").split("cells ran")[0].rsplit("\n", 1)[0] == text.split("cells ran")[0].rsplit("\n", 1)[0]


def test_nothing_broke_exits_0(watched: tuple[Spec, WatchRequest, FakeRunner], monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    monkeypatch.setitem(INDEX, "transformers", ["4.51.3", "4.52.0"])
    spec, request, _ = watched
    w = run_watch(spec, request, Console(quiet=True))
    assert w.exit_code() == 0 and not w.regressions
    assert "Nothing: every newer release tried shows the baseline's outcomes." in markdown(w, reports="r")


def test_no_index_is_exit_3(watched: tuple[Spec, WatchRequest, FakeRunner], monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    def unreachable(name: str, settings: Any = None, **kw: Any) -> Listing:
        return Listing(name, asked=["https://index.example/simple"], problems={"https://index.example/simple": "Name or service not known"})

    monkeypatch.setattr(watch_run, "list_releases", unreachable)
    spec, request, _ = watched
    with pytest.raises(BackendError, match="no index answered"):
        run_watch(spec, request, Console(quiet=True))


def test_a_profile_with_several_values_per_axis_is_not_a_baseline(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.replace("transformers: [4.51.3]", "transformers: [4.51.3, 4.57.6]"))
    with pytest.raises(InputError, match="several values for transformers"):
        baseline_environment(load(path).profiles["stack"], "cpu")


def test_unknown_releases_metadata_is_read_once_and_rules_them_out(watched: tuple[Spec, WatchRequest, FakeRunner], monkeypatch: pytest.MonkeyPatch) -> None:
    """trl 1.15.0 is not in the data file: its wheel's metadata is read (here: a stand-in for pip download), rules it
    out on the baseline, and is kept in the cache, so the next watch reads nothing."""
    from rich.console import Console

    from envmatrix.facts import pkgconstraints

    calls: list[list[str]] = []

    def fetch(pins: list[str], folder: Path, index: str = "") -> dict[str, Any]:
        calls.append(pins)
        facts = {"wheel": "trl-1.15.0-py3-none-any.whl", "sha256": "0" * 64, "requires_dist": ["transformers>=4.56.2"], "requires_python": ">=3.10"}
        return {"trl": {"1.15.0": facts}}

    monkeypatch.setitem(INDEX, "trl", ["0.18.2", "1.15.0"])
    monkeypatch.setattr(pkgconstraints, "fetch", fetch)
    spec, request, _ = watched
    w = run_watch(spec, request, Console(quiet=True))
    trl = next(a for a in w.axes if a.axis == "trl")
    assert calls == [["trl==1.15.0"]] and trl.newest is None
    assert (
        trl.ruled_out["1.15.0"]
        == "trl 1.15.0 requires transformers>=4.56.2 (from trl-1.15.0-py3-none-any.whl's metadata); this environment has transformers 4.51.3"
    )
    run_watch(spec, request, Console(quiet=True))
    assert calls == [["trl==1.15.0"]], "read once, then from the cache"


def test_the_newest_that_installs_is_bisected_over_metadata(watched: tuple[Spec, WatchRequest, FakeRunner], monkeypatch: pytest.MonkeyPatch) -> None:
    """40 trl releases the data file does not know, those from 2.20.0 on needing a newer transformers: the newest that
    installs on the baseline (2.19.0) is found with a handful of metadata reads, not forty."""
    from rich.console import Console

    from envmatrix.facts import pkgconstraints

    releases = [f"2.{i}.0" for i in range(40)]
    reads: list[str] = []

    def fetch(pins: list[str], folder: Path, index: str = "") -> dict[str, Any]:
        version = pins[0].split("==")[1]
        reads.append(version)
        needs = ["transformers>=4.56.2"] if int(version.split(".")[1]) >= 20 else ["transformers>=4.50.0"]
        return {"trl": {version: {"wheel": f"trl-{version}-py3-none-any.whl", "sha256": "0" * 64, "requires_dist": needs, "requires_python": None}}}

    monkeypatch.setitem(INDEX, "trl", ["0.18.2", *releases])
    monkeypatch.setattr(pkgconstraints, "fetch", fetch)
    spec, request, _ = watched
    w = run_watch(spec, request, Console(quiet=True))
    trl = next(a for a in w.axes if a.axis == "trl")
    assert trl.newest == "2.19.0" and trl.latest == "2.39.0" and len(reads) <= 7, reads
    assert "2.39.0" in trl.ruled_out and trl.newer[-1] == "2.19.0"


def test_the_host_backend_only_where_this_interpreter_is_the_baseline(watched: tuple[Spec, WatchRequest, FakeRunner]) -> None:
    from rich.console import Console

    spec, request, runner = watched
    with pytest.raises(InputError, match="--backend host runs the cells in this interpreter"):
        run_watch(spec, dataclasses.replace(request, backend="host"), Console(quiet=True))
    assert runner.runs == [], "nothing ran"


def test_the_host_backend_runs_the_baseline_and_says_the_rest_was_listed_not_run(
    watched: tuple[Spec, WatchRequest, FakeRunner], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rich.console import Console

    spec, request, runner = watched
    monkeypatch.setattr(watch_run, "_check_host_is_baseline", lambda base: None)
    w = run_watch(spec, dataclasses.replace(request, backend="host"), Console(quiet=True))
    assert w.listed_only and w.exit_code() == 0
    assert {c.split("/")[0] for c in runner.runs} == {w.base.id}, "only the baseline ran"
    text = markdown(w, reports="reports")
    assert "## Releases listed" in text and "## Releases tried" not in text
    assert "| transformers | 4.51.3 | 8 |" in text and "listed, not run (host backend)" in text
    assert "Nothing was tried beyond the baseline (host backend)." in text and "Nothing: every newer release" not in text


def test_evidence_from_logs_cannot_become_markup(watched: tuple[Spec, WatchRequest, FakeRunner]) -> None:
    from envmatrix.answers.watch_summary import _code

    hostile = "x ``` <script>alert(1)</script> [link](http://evil) \x1b[2J\u202e done"
    code = _code(hostile)
    assert code.startswith("```` ") and code.endswith(" ````") and "\x1b" not in code and "\u202e" not in code
    assert _code("a\nb\r\nc") == "` a b c `"


def test_cli_watch_exit_statuses(tmp_path: Path, watched: tuple[Spec, WatchRequest, FakeRunner], capsys: pytest.CaptureFixture[str]) -> None:
    from envmatrix.cli import main

    spec, request, _ = watched
    path = Path(spec.path)
    assert main(["watch", "--file", str(path), "--profile", "nope"]) == 2
    assert "no profile 'nope'" in capsys.readouterr().err
    summary = tmp_path / "summary.md"
    code = main(["watch", "--file", str(path), "--reports", str(request.reports), "--venvs", str(request.venvs), "--summary", str(summary), "--format", "json"])
    data = __import__("json").loads(capsys.readouterr().out)
    assert code == 1 == data["exit_code"] and summary.read_text().startswith("# envmatrix watch: profile `stack` on cpu")
