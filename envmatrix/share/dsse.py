"""DSSE envelopes (secure-systems-lab/dsse v1.0): a payload, its type, and signatures over the
pre-authentication encoding (PAE) of both, so a signature covers the type as well as the bytes.

The signatures themselves are ed25519 from `cryptography`. PAE is written here: it is the envelope
format's six-field byte layout (no cryptography in it), checked against the spec's own test vector, and
no well-kept Python library offers it without also bringing its own key formats.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ..errors import InputError
from .keys import PublicKey, keyid

IN_TOTO = "application/vnd.in-toto+json"  # in-toto's envelope layer: the payload is a JSON Statement
MAX_SIGNATURES = 16


class EnvelopeError(InputError):
    """An attestation file that is not a DSSE envelope."""


@dataclass(frozen=True)
class Envelope:
    """A decoded envelope: the payload bytes, their type, and (keyid hint, signature) pairs."""

    payload_type: str
    body: bytes
    signatures: tuple[tuple[str, bytes], ...]


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSEv1 SP LEN(type) SP type SP LEN(body) SP body (lengths in ASCII decimal)."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(body), body)


def sign(body: bytes, key: Ed25519PrivateKey, payload_type: str = IN_TOTO) -> dict[str, Any]:
    """The JSON envelope of `body` signed with `key` (its keyid as the hint)."""
    signature = key.sign(pae(payload_type, body))
    return {
        "payloadType": payload_type,
        "payload": base64.b64encode(body).decode("ascii"),
        "signatures": [{"keyid": keyid(key.public_key()), "sig": base64.b64encode(signature).decode("ascii")}],
    }


def _b64(text: Any, where: str, source: str) -> bytes:
    """Standard or URL-safe base64, as the spec says verifiers must accept."""
    if not isinstance(text, str):
        raise EnvelopeError(f"{source}: {where}: expected a base64 string")
    try:
        return base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise EnvelopeError(f"{source}: {where}: not base64") from None


def parse(data: Any, source: str) -> Envelope:
    """An envelope from its JSON value; EnvelopeError naming what is missing."""
    if not isinstance(data, dict):
        raise EnvelopeError(f"{source}: not a DSSE envelope (expected a JSON object)")
    payload_type = data.get("payloadType")
    if not isinstance(payload_type, str):
        raise EnvelopeError(f"{source}: payloadType: missing")
    sigs = data.get("signatures")
    if not isinstance(sigs, list) or not 1 <= len(sigs) <= MAX_SIGNATURES:
        raise EnvelopeError(f"{source}: signatures: expected a list of 1 to {MAX_SIGNATURES}")
    pairs = []
    for i, s in enumerate(sigs):
        if not isinstance(s, dict):
            raise EnvelopeError(f"{source}: signatures[{i}]: expected an object")
        hint = s.get("keyid") or ""
        pairs.append((hint if isinstance(hint, str) else "", _b64(s.get("sig"), f"signatures[{i}].sig", source)))
    return Envelope(payload_type, _b64(data.get("payload"), "payload", source), tuple(pairs))


def signer(envelope: Envelope, keys: Iterable[PublicKey]) -> PublicKey | None:
    """The first key a signature of the envelope verifies with, or None. Every key is tried against every
    signature: the keyid is an unauthenticated hint and decides nothing."""
    message = pae(envelope.payload_type, envelope.body)
    for key in keys:
        for _hint, signature in envelope.signatures:
            try:
                key.key.verify(signature, message)
            except InvalidSignature:
                continue
            return key
    return None
