"""Build fixture records in the runner's format (for report, vetting and lock tests)."""

from __future__ import annotations

from typing import Any

from envmatrix.classify import REMEDIES


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
) -> dict[str, Any]:
    fa = "fanone" if flash_attn == "none" else f"fa{flash_attn}"
    tag = "cpu" if cuda == "none" else "cu" + cuda.replace(".", "")
    build = f"{tag}-torch{torch}-tf{transformers}-{fa}-py3.11"
    env = f"{tag}-torch{torch}-tf{transformers}-{fa}-{gpu.lower()}-py3.11"
    control = None if expect is None else ("reproduced" if outcome == expect else "not reproduced")
    return {
        "record_version": 1,
        "cell": {
            "id": f"{env}/{scenario}",
            "env": env,
            "build": build,
            "cuda": cuda,
            "torch": torch,
            "transformers": transformers,
            "flash_attn": flash_attn,
            "gpu": gpu,
            "python": "3.11",
            "scenario": scenario,
            "expect": expect,
            "status": "skipped" if outcome == "skipped" else "planned",
            "reason": "",
        },
        "status": "skipped" if outcome == "skipped" else "done",
        "backend": "venv",
        "runner": {"host": "test"},
        "timings": {"prepare_s": 1.0, "probe_s": 5.0},
        "exit_code": 0,
        "signal": None,
        "result": {"probe_version": "1", "steps_completed": 4, "parity": {"rel_err": 1e-7}},
        "metrics": [{"step": i, "loss": 0.1 * i, "grad_norm": 1.0 / i} for i in (1, 2, 3, 4)],
        "environment": {"build": {"freeze": freeze or [], "tool": "pip"}},
        "log": {"path": "/tmp/x.log", "tail": log_tail},
        "outcome": {"class": outcome, "evidence": evidence, "remedy": REMEDIES[outcome], "rule": outcome, "also": []},
        "control": control,
        "expect": expect,
    }
