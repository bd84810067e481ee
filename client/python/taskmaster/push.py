"""Push queues: verifying a delivery's signature (docs/api.md "Verifying a
delivery").

A push queue's deliveries carry ``Taskmaster-Signature: t=<unix
seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` keyed with the queue's
secret (during a rotation's overlap, one ``v1`` per secret). An endpoint
checks it over the raw body, before parsing it::

    taskmaster.verify_signature(secret, request.headers["Taskmaster-Signature"], raw_body)
"""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import List, Optional

from .errors import TaskmasterError

HEADER_TASK_ID = "Taskmaster-Task-Id"
"""The task delivered: the same on every delivery of the task (delivery is
at least once: deduplicate on it)."""
HEADER_ATTEMPT = "Taskmaster-Attempt"
"""The delivery's attempt number (1 for the first)."""
HEADER_QUEUE = "Taskmaster-Queue"
HEADER_SIGNATURE = "Taskmaster-Signature"

DEFAULT_SIGNATURE_TOLERANCE = 300.0
"""How far (seconds) a signature's time may be from now."""


class SignatureError(TaskmasterError):
    """A push delivery's signature does not verify: answer it 401 (a
    non-retryable status by default)."""


class SignatureMalformed(SignatureError):
    """The header is not ``t=<unix>,v1=<hex>[,v1=...]``."""


class SignatureExpired(SignatureError):
    """Its time is further than the tolerance from now: a replay, or
    clocks apart."""


class SignatureMismatch(SignatureError):
    """No ``v1`` matches the secret and the body."""


def verify_signature(
    secret: str, header: str, body: bytes, *, tolerance: float = DEFAULT_SIGNATURE_TOLERANCE, now: Optional[float] = None
) -> None:
    """Checks a push delivery's ``Taskmaster-Signature`` header against the
    raw request body (exactly as received) and the queue's secret, or
    raises a :class:`SignatureError`: the header's time must lie within
    ``tolerance`` seconds of ``now`` (``time.time()`` when None), and one of
    its ``v1`` values must be the hex HMAC-SHA256, keyed with the secret's
    UTF-8 bytes, of ``<t>.<body>`` (while a rotation's overlap lasts the
    header carries one per secret: either secret verifies)."""
    ts = ""
    sigs: List[str] = []
    for part in header.split(","):
        k, sep, v = part.strip().partition("=")
        if not sep:
            raise SignatureMalformed(f"taskmaster: malformed {HEADER_SIGNATURE}")
        if k == "t":
            ts = v
        elif k == "v1":
            sigs.append(v)
    if not ts.isdigit() or not ts.isascii() or not sigs:
        raise SignatureMalformed(f"taskmaster: malformed {HEADER_SIGNATURE}")
    if abs((time.time() if now is None else now) - int(ts)) > tolerance:
        raise SignatureExpired(f"taskmaster: {HEADER_SIGNATURE} outside the tolerance ({tolerance:g}s)")
    want = hmac.new(secret.encode("utf-8"), ts.encode("ascii") + b"." + bytes(body), hashlib.sha256).hexdigest()
    if not any(hmac.compare_digest(s.encode("utf-8"), want.encode("ascii")) for s in sigs):
        raise SignatureMismatch(f"taskmaster: {HEADER_SIGNATURE} does not match")


__all__ = [
    "verify_signature", "SignatureError", "SignatureMalformed", "SignatureExpired", "SignatureMismatch",
    "DEFAULT_SIGNATURE_TOLERANCE", "HEADER_TASK_ID", "HEADER_ATTEMPT", "HEADER_QUEUE", "HEADER_SIGNATURE",
]
