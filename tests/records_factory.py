"""Build fixture records through the same constructor the runner uses (report, vetting and lock tests)."""

from __future__ import annotations

from envmatrix.records.outcomes import decided
from envmatrix.records.record import BuildFacts, CellInfo, LogRef, Record, RunnerInfo, Timings


def make_record(
    outcome: str,
    *,
    scenario: str = "fp32-sdpa",
    expect: str | None = None,
    torch: str = "2.6.0",
    transformers: str = "4.51.3",
    flash_attn: str = "none",
    gpu: str = "A100",
    cuda: str = "12.4",
    evidence: str = "evidence line",
    log_tail: str = "step 1\n",
    freeze: list[str] | None = None,
    build: BuildFacts | None = None,
    seen_gpu: str | None = None,
    rule: str | None = None,
) -> Record:
    """A record as the runner writes it; the probe saw `seen_gpu` (default: the cell's own GPU)."""
    fa = "fanone" if flash_attn == "none" else f"fa{flash_attn}"
    tag = "cpu" if cuda == "none" else "cu" + cuda.replace(".", "")
    build_id = f"{tag}-torch{torch}-tf{transformers}-{fa}-py3.11"
    env = f"{tag}-torch{torch}-tf{transformers}-{fa}-{gpu.lower()}-py3.11"
    skipped = outcome == "skipped"
    cell = CellInfo(
        id=f"{env}/{scenario}",
        env=env,
        build=build_id,
        cuda=cuda,
        torch=torch,
        transformers=transformers,
        flash_attn=flash_attn,
        gpu=gpu,
        python="3.11",
        scenario=scenario,
        expect=expect,
        status="skipped" if skipped else "planned",
    )
    return Record(
        cell=cell,
        status="skipped" if skipped else "done",
        outcome=decided(outcome, evidence, rule or outcome),
        control=None if expect is None else ("reproduced" if outcome == expect else "not reproduced"),
        backend="venv",
        runner=RunnerInfo(host="test"),
        timings=Timings(prepare_s=1.0, probe_s=5.0),
        exit_code=0,
        build=build or BuildFacts(tool="pip", freeze=tuple(freeze or ())),
        result={"probe_version": "1", "steps_completed": 4, "parity": {"rel_err": 1e-7}},
        metrics=tuple({"step": i, "loss": 0.1 * i, "grad_norm": 1.0 / i} for i in (1, 2, 3, 4)),
        log=LogRef(path="/tmp/x.log", tail=log_tail),
        env_facts=None if skipped else device_facts(seen_gpu or gpu),
    )


def device_facts(gpu: str) -> dict[str, object]:
    """What the probe reports of its device for a GPU type (the nvidia-smi style name)."""
    if gpu == "cpu":
        return {"device": "cpu", "gpu_name": None}
    return {"device": "cuda:0", "gpu_name": f"NVIDIA {gpu}-SXM-80GB", "compute_capability": "9.0"}
