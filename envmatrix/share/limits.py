"""How much a published site may make envmatrix download, hold and wait for.

A site is someone else's web server: it may be slow, huge, endless or hostile. Every read of one is
bounded by these caps, and a site that breaks one is named and dropped while the other sites merge.

The caps on each file a site serves come from probes/untrusted.py, the owner of the bounds on every file a user
hands over; the network's (bytes of a whole site, redirects, timeouts) are here.
"""

from __future__ import annotations

from dataclasses import dataclass

from probes import untrusted

from ..records.record import MAX_RECORD_BYTES

MAX_INDEX_BYTES = untrusted.PUBLISHED_INDEX.max_bytes
MAX_RECORDS_PER_SITE = untrusted.PUBLISHED_INDEX.max_values
MAX_ENVELOPE_BYTES = untrusted.ATTESTATION.max_bytes
MAX_KEY_BYTES = untrusted.PEM_KEY.max_bytes
MAX_SITE_BYTES = 1 << 30  # everything read from one site
MAX_REDIRECTS = 5  # hops one request may follow (GitHub Pages needs one for a missing trailing slash)
CONNECT_TIMEOUT_S = 10.0  # to open a connection
STALL_TIMEOUT_S = 20.0  # without a single byte arriving
MAX_FILE_SECONDS = 60.0  # for one file, however the bytes trickle in
MAX_SITE_SECONDS = 600.0  # for a whole site


@dataclass(frozen=True)
class Limits:
    """The caps one read of a site runs under (tests pass smaller ones; the command uses the defaults)."""

    index_bytes: int = MAX_INDEX_BYTES
    records: int = MAX_RECORDS_PER_SITE
    record_bytes: int = MAX_RECORD_BYTES
    envelope_bytes: int = MAX_ENVELOPE_BYTES
    key_bytes: int = MAX_KEY_BYTES
    site_bytes: int = MAX_SITE_BYTES
    redirects: int = MAX_REDIRECTS
    connect_s: float = CONNECT_TIMEOUT_S
    stall_s: float = STALL_TIMEOUT_S
    file_s: float = MAX_FILE_SECONDS
    site_s: float = MAX_SITE_SECONDS
