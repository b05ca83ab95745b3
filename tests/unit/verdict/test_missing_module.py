"""Missing modules and undeclared dependencies are named: the module, what provides it, the importer."""

from __future__ import annotations

from pathlib import Path

import pytest

from envmatrix.records.outcomes import Outcome
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.imports import read_missing
from envmatrix.verdict.logscan import scan_text

DATA = Path(__file__).resolve().parents[2] / "data" / "missing-module"
INDEX = [line.split("\t") for line in (DATA / "INDEX.tsv").read_text().splitlines()[1:]]


@pytest.mark.parametrize(("name", "klass", "module", "importer"), [row[:4] for row in INDEX], ids=[row[0] for row in INDEX])
def test_real_logs_name_the_module_and_its_importer(name: str, klass: str, module: str, importer: str) -> None:
    verdict = classify(RunFacts(scan=scan_text((DATA / name).read_bytes()), exit_code=1))
    assert verdict.outcome == klass, verdict
    assert module in verdict.evidence and f"imported by {importer}" in verdict.evidence
    assert module in verdict.remedy and "pip install" in verdict.remedy


WORDINGS = [
    ("ModuleNotFoundError: No module named 'yaml'", "yaml", "pyyaml"),
    ("ImportError: No module named cv2", "cv2", "opencv-python"),
    ("ImportError: Using the `Trainer` with `PyTorch` requires `accelerate>=0.26.0`: Please run `pip install transformers[torch]`", "accelerate", "accelerate"),
    ("importlib.metadata.PackageNotFoundError: No package metadata was found for bitsandbytes", "bitsandbytes", "bitsandbytes"),
    ("ImportError: ... the package flash_attn seems to be not installed. Please refer to the documentation", "flash_attn", "flash-attn"),
    ("ImportError: deepspeed is not installed. Please install it", "deepspeed", "deepspeed"),
]


@pytest.mark.parametrize(("line", "module", "dist"), WORDINGS)
def test_every_wording_names_what_to_install(line: str, module: str, dist: str) -> None:
    verdict = classify(RunFacts(scan=scan_text(f"Traceback (most recent call last):\n{line}\n"), exit_code=1))
    assert verdict.outcome == Outcome.MISSING_MODULE, (line, verdict)
    missing = read_missing(line)
    assert missing is not None and missing.module == module and missing.install == dist
    assert f"pip install {dist}" in verdict.remedy


def test_a_name_a_module_lacks_is_a_version_mismatch() -> None:
    log = (
        'Traceback (most recent call last):\n  File "/v/lib/python3.11/site-packages/trl/trainer/utils.py", line 40, in <module>\n'
        "ImportError: cannot import name 'top_k_top_p_filtering' from 'transformers' (/v/lib/python3.11/site-packages/transformers/__init__.py)\n"
    )
    verdict = classify(RunFacts(scan=scan_text(log), exit_code=1))
    assert verdict.outcome == Outcome.API_MISMATCH and "caller trl, callee transformers" in verdict.evidence
    assert "trl imports `top_k_top_p_filtering` from transformers, which the installed transformers does not have" in verdict.remedy
    assert "move trl to a release written for the installed transformers" in verdict.remedy


@pytest.mark.parametrize(
    ("line", "outcome"),
    [
        # a circular import is a bug of the code (error), the user's own module one not installed: not two releases
        (
            "ImportError: cannot import name 'x' from partially initialized module 'trl' (most likely due to a circular import) (/v/site-packages/trl/a.py)",
            Outcome.ERROR,
        ),
        ("ImportError: cannot import name 'helper' from 'myutils' (/home/me/project/myutils.py)", Outcome.MISSING_MODULE),
        ("ModuleNotFoundError: No module named 'myproject.rewards'", Outcome.MISSING_MODULE),
    ],
)
def test_an_import_of_the_users_own_code_is_no_mismatch(line: str, outcome: Outcome) -> None:
    assert classify(RunFacts(scan=scan_text(line + "\n"), exit_code=1)).outcome == outcome


def test_a_warning_in_a_run_that_trained_is_not_a_failure() -> None:
    log = "WARNING: No module named 'triton'; using the slow path\n" + "".join(f"{{'loss': 0.5, 'grad_norm': {i}.5}}\n" for i in range(1, 5))
    assert classify(RunFacts(scan=scan_text(log), exit_code=0)).outcome == Outcome.OK
