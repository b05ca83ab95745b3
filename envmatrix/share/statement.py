"""A record as an in-toto Statement v1 with the Test Result predicate (in-toto/attestation
spec/predicates/test-results.md): the subject is the record file's sha256 (and the environment lock's,
where one was published), `configuration` is the cell, `url` is where the record is, and the cell's id
is among `passedTests` or `failedTests`.

`result` is written "pass" or "fail", as the spec's schema and example write it (its field list calls
it a boolean; the spec contradicts itself, and GitHub's attest action takes either).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from typing import Any

from .. import __version__
from ..errors import InputError
from ..records.outcomes import Outcome
from ..records.record import Record, Status

STATEMENT = "https://in-toto.io/Statement/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
CELL_MEDIA_TYPE = "application/vnd.envmatrix.cell+json"


class StatementError(InputError):
    """A signed payload that is not the statement envmatrix writes."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def passed(record: Record) -> bool | None:
    """Whether a cell passed as a test: a healthy scenario that was ok, or a control that reproduced its
    failure. None for a cell that did not run (skipped, or its environment failed to build)."""
    if record.status != Status.DONE:
        return None
    return record.control == "reproduced" if record.expect else record.klass == Outcome.OK


def configuration(record: Record) -> dict[str, Any]:
    """The cell as a ResourceDescriptor: its id, a digest of its description, and the description itself
    (axes, packages, scenario settings) with the outcome the record holds."""
    cell = asdict(record.cell)
    cell["scenario_settings"] = dict(record.cell.scenario_settings)
    cell["packages"] = dict(record.cell.packages)
    canonical = json.dumps(cell, sort_keys=True, separators=(",", ":"), default=str).encode()
    return {
        "name": record.id,
        "digest": {"sha256": sha256(canonical)},
        "mediaType": CELL_MEDIA_TYPE,
        "annotations": {"cell": cell, "outcome": record.klass, "control": record.control, "status": str(record.status), "envmatrix": __version__},
    }


def result_predicate(records: list[Record], url: str | None) -> dict[str, Any]:
    """The Test Result predicate over some cells (one record, or a whole results folder for a keyless
    attestation of every record at once)."""
    verdicts = [(r.id, passed(r)) for r in records]
    predicate: dict[str, Any] = {
        "result": "pass" if all(v is True for _, v in verdicts) else "fail",
        "configuration": [configuration(r) for r in records],
        "passedTests": [i for i, v in verdicts if v is True],
        "warnedTests": [i for i, v in verdicts if v is None],  # did not run: not a pass
        "failedTests": [i for i, v in verdicts if v is False],
    }
    if url:
        predicate["url"] = url
    return predicate


def statement(record: Record, subjects: dict[str, bytes], url: str | None) -> dict[str, Any]:
    """The statement for one record: each subject (the record file, its environment's lock) by name and sha256."""
    return {
        "_type": STATEMENT,
        "subject": [{"name": name, "digest": {"sha256": sha256(data)}} for name, data in subjects.items()],
        "predicateType": TEST_RESULT,
        "predicate": result_predicate([record], url),
    }


def encode(data: dict[str, Any]) -> bytes:
    """The bytes that are signed (compact, key order kept: the signature covers these bytes, not a canonical form)."""
    return json.dumps(data, separators=(",", ":")).encode()


def covered_digest(body: bytes, name: str, source: str) -> str | None:
    """The sha256 a signed statement claims for the subject `name`, or None when it names no such subject;
    StatementError when the payload is not a Test Result statement."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise StatementError(f"{source}: the signed payload is not JSON") from None
    if not isinstance(data, dict) or data.get("_type") != STATEMENT or data.get("predicateType") != TEST_RESULT:
        raise StatementError(f"{source}: the signed payload is not an in-toto Statement v1 with the Test Result predicate")
    subjects = data.get("subject")
    if not isinstance(subjects, list):
        raise StatementError(f"{source}: the statement has no subject list")
    for s in subjects:
        if isinstance(s, dict) and s.get("name") == name:
            digest = s.get("digest")
            value = digest.get("sha256") if isinstance(digest, dict) else None
            return value if isinstance(value, str) else None
    return None
