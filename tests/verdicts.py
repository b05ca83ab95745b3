"""What the classifier says of a log written for a test: its class, the last boundary an exception crossed, and the
sides of the API mismatch it names (the verdict's own crossing, as `classify --format json` reports it)."""

from __future__ import annotations

from envmatrix.verdict.boundary import Boundary, of
from envmatrix.verdict.classify import RunFacts, classify
from envmatrix.verdict.evidence import strong
from envmatrix.verdict.logscan import scan_text
from envmatrix.verdict.remedies import of_scan


def verdict(log: str) -> str:
    return classify(RunFacts(scan=scan_text(log.encode()))).outcome.value


def last_boundary(log: str) -> Boundary:
    found = [b for j in scan_text(log.encode()).judged if (b := of(j.raised)) is not None]
    assert found, log
    return found[-1]


def crossed(log: str) -> Boundary:
    """The boundary of the API mismatch the log shows, read with the whole log around it (as classify's evidence is)."""
    scan = scan_text(log.encode())
    judged = strong(scan, "api_mismatch")
    assert judged is not None, log
    found = of_scan(scan, judged, {})
    assert found is not None
    return found


def sides(log: str) -> tuple[str, str, str]:
    """(caller, callee, why the caller) of the API mismatch the log shows."""
    found = crossed(log)
    return found.who, found.callee_who, found.caller_reason
