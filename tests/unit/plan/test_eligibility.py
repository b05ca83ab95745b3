"""THE eligibility: every caller (plan, run, bisect, doctor) gets the same status, reasons and kinds."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from envmatrix.answers.bisect_run import BisectRequest, base_environment, check_held
from envmatrix.answers.doctor import cells_for
from envmatrix.errors import InputError
from envmatrix.plan import eligibility
from envmatrix.plan.cells import COVERED, PLANNED, SKIPPED, Environment
from envmatrix.plan.expand import expand
from envmatrix.spec.matrix import load

ROOT = Path(__file__).resolve().parents[3]
SPEC = load(ROOT / "matrix.yaml")
CPU = SPEC.profiles["cpu"]


def env(transformers: str = "4.57.6", gpu: str = "cpu", cuda: str = "none", **packages: str) -> Environment:
    return Environment(cuda, "2.13.0", transformers, "none", gpu, "3.11", tuple(sorted(packages.items())))


def test_a_trl_scenario_without_trl_is_not_applicable_and_says_so() -> None:
    cell = eligibility.judge(CPU, env(trl="none"), SPEC.scenarios["trl-grpo"])
    assert cell.status == SKIPPED and eligibility.NEEDS in cell.kinds and "needs the trl package" in cell.reason
    assert set(cell.kinds) <= set(eligibility.NOT_APPLICABLE)  # by design, not an incompatibility
    assert eligibility.judge(CPU, env(trl="0.19.1"), SPEC.scenarios["trl-grpo"]).status == PLANNED


def test_a_zero_scenario_without_deepspeed_is_not_applicable_and_says_so() -> None:
    zero3 = SPEC.scenarios["zero3"]
    cell = eligibility.judge(CPU, env(), zero3)
    assert cell.status == SKIPPED and eligibility.NEEDS in cell.kinds
    assert "parallel: zero3 needs the deepspeed package, and this environment has none" in cell.reason
    assert eligibility.judge(CPU, env(deepspeed="0.18.4"), zero3).status == PLANNED
    assert eligibility.judge(CPU, env(), SPEC.scenarios["fsdp2"]).status == PLANNED  # torch's own: nothing more to install


def test_trl_under_fsdp2_needs_a_gpu_and_under_zero_needs_deepspeed() -> None:
    """accelerate engages FSDP only on GPUs: on the cpu runner the cell would silently train under DDP."""
    cell = eligibility.judge(CPU, env(trl="1.16.0", deepspeed="0.18.9"), SPEC.scenarios["trl-fsdp2"])
    assert cell.status == SKIPPED and "accelerate engages FSDP only on GPUs" in cell.reason
    assert eligibility.judge(CPU, env(trl="1.16.0", deepspeed="0.18.9"), SPEC.scenarios["trl-zero3"]).status == PLANNED
    assert "needs the deepspeed package" in eligibility.judge(CPU, env(trl="1.16.0"), SPEC.scenarios["trl-zero3"]).reason


def test_package_metadata_and_catalog_reasons_have_their_kinds() -> None:
    too_old = eligibility.judge(CPU, env(transformers="4.51.3", trl="1.16.0"), SPEC.scenarios["trl-grpo"])
    assert too_old.status == SKIPPED and eligibility.PACKAGES in too_old.kinds and "metadata" in too_old.reason
    no_build = eligibility.judge(CPU, Environment("12.4", "2.13.0", "4.57.6", "none", "A100", "3.11"), SPEC.scenarios["fp32-sdpa"])
    assert eligibility.CATALOG in no_build.kinds


def test_host_reasons_only_where_the_cell_needs_gpus() -> None:
    ddp = next(s for s in SPEC.scenarios.values() if s.world_size == 2)
    gpu_env = Environment("13.0", "2.13.0", "4.57.6", "none", "A100", "3.12")
    assert eligibility.host_reasons(gpu_env, ddp, 1)[0].kind == eligibility.HOST
    assert eligibility.host_reasons(gpu_env, ddp, 2) == []
    assert eligibility.host_reasons(gpu_env, ddp, None) == []  # planning for another host
    assert eligibility.host_reasons(env(), ddp, 0) == []  # CPU ranks share the CPU over gloo


def test_doctor_judges_the_installed_environment_by_the_same_rules() -> None:
    here = env(trl="none")
    cells = {c.scenario.name: c for c in cells_for(SPEC, "cpu", here, ["trl-grpo", "fp32-sdpa"])}
    assert cells["trl-grpo"].status == SKIPPED and "needs the trl package" in cells["trl-grpo"].reason
    assert cells["fp32-sdpa"].status == PLANNED
    # installed: whether it could be built is not asked (a torch the catalog does not know still runs)
    odd = Environment("none", "2.99.0", "4.57.6", "none", "cpu", "3.11")
    assert eligibility.judge(CPU, odd, SPEC.scenarios["fp32-sdpa"]).status == SKIPPED
    assert eligibility.judge(CPU, odd, SPEC.scenarios["fp32-sdpa"], installed=True).status == PLANNED


def test_plan_and_judge_agree_on_every_cell() -> None:
    for cell in expand(SPEC, "cpu"):
        again = eligibility.judge(CPU, cell.env, cell.scenario)
        if cell.status == COVERED:  # planned by the eligibility; another planned cell's run covers it
            assert again.status == PLANNED and cell.covered_by
            continue
        assert (again.status, again.reason, again.kinds) == (cell.status, cell.reason, cell.kinds)


def request(**kw: object) -> BisectRequest:
    base: dict[str, object] = dict(axis="transformers", good="4.57.6", bad="5.23.0", scenario="trl-grpo", profile="cpu", gpu="cpu",
                                   backend="venv", reports=Path("r"), venvs=Path("v"), base=ROOT)  # fmt: skip
    return BisectRequest(**{**base, **kw})  # type: ignore[arg-type]


def test_bisect_never_holds_a_needed_package_at_none() -> None:
    base = base_environment(SPEC, request(), Console(quiet=True))
    assert base["trl"] != "none" and "transformers" not in base
    held = base_environment(SPEC, request(held={"trl": "0.19.1"}), Console(quiet=True))
    assert held["trl"] == "0.19.1"
    plain = base_environment(SPEC, request(scenario="fp32-sdpa"), Console(quiet=True))
    assert plain["trl"] == "none"  # the profile's first value where the scenario does not need it


def test_bisect_set_is_validated() -> None:
    for held, words in (
        ({"transformers": "5.0.0"}, "is the axis being bisected"),
        ({"trl": "1.0;rm"}, "trl=1.0;rm"),
        ({"Bad_Name": "1.0"}, "not a package name"),
        ({"gpu": "H100"}, "pass --gpu H100"),
        ({"python": "three"}, "not a Python version"),
    ):
        try:
            check_held(CPU, held, "transformers")
        except InputError as exc:
            assert words in str(exc), (held, str(exc))
        else:
            raise AssertionError(f"--set {held} was accepted")
    check_held(CPU, {"trl": "0.19.1", "torch": "2.13.0"}, "transformers")


def test_an_extras_constraints_hold_where_the_environment_takes_the_extra_up() -> None:
    """trl with vllm installed is what `pip install trl[vllm]` gives: TRL 1.16.0's [vllm] extra (vllm 0.22.0-0.31.0, read
    from its wheel) rules out the vllm 0.11.0 pairing the gpu profile had; a release inside the range is planned."""
    gpu = SPEC.profiles["gpu"]
    vllm = SPEC.scenarios["trl-vllm-colocate"]

    def h20(vllm_version: str, transformers: str) -> Environment:
        return Environment("13.0", "2.13.0", transformers, "none", "H20", "3.12", (("trl", "1.16.0"), ("vllm", vllm_version)))

    old = eligibility.judge(gpu, h20("0.11.0", "4.57.6"), vllm)
    assert old.status == SKIPPED and eligibility.PACKAGES in old.kinds
    assert "trl 1.16.0's extra [vllm] requires vllm<=0.31.0,>=0.22.0" in old.reason and "this environment has vllm 0.11.0" in old.reason
    assert eligibility.judge(gpu, h20("0.31.0", "5.17.0"), vllm).status == PLANNED
    # without vllm in the environment the extra is not taken up: trl alone is planned
    assert eligibility.judge(CPU, env(trl="1.16.0"), SPEC.scenarios["trl-grpo"]).status == PLANNED
    # [deepspeed]: deepspeed >= 0.18.6 for trl 1.16.0, while trl 1.8.0 accepts 0.18.4
    zero3 = SPEC.scenarios["trl-zero3"]
    assert "extra [deepspeed] requires deepspeed>=0.18.6" in eligibility.judge(CPU, env(trl="1.16.0", deepspeed="0.18.4"), zero3).reason
    assert eligibility.judge(CPU, env(trl="1.8.0", deepspeed="0.18.4"), zero3).status == PLANNED
