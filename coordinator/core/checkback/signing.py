"""Signatures of pushed check requests (HMAC-SHA256 over a timestamp and the raw body).

The coordinator sends `X-Coordinator-Timestamp: <unix seconds>` and
`X-Coordinator-Signature: sha256=<hex digest>`, the digest taken with the
shared secret (`check_push_secret`) over `<timestamp>.<raw body>` (Stripe's
scheme). A push producer recomputes it over the exact bytes it received and
refuses the request when they differ or when the timestamp is outside its
window: a captured request replayed later no longer passes.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

from coordinator.domain.check_urls import DEFAULT_MAX_AGE_SECONDS

SIGNATURE_HEADER = "X-Coordinator-Signature"
TIMESTAMP_HEADER = "X-Coordinator-Timestamp"
_PREFIX = "sha256="
# ASCII digits only: int() would also take "+1", " 1", "1_0" or other scripts' digits.
_TIMESTAMP = re.compile(r"[0-9]{1,15}")


def sign(body: bytes, secret: str, timestamp: int | str) -> str:
    """The signature header value for `body` sent at `timestamp` (the header's text)."""
    content = f"{timestamp}.".encode() + body
    return _PREFIX + hmac.new(secret.encode(), content, hashlib.sha256).hexdigest()


def verify(
    body: bytes,
    secret: str,
    signature: str | None,
    timestamp: str | None,
    *,
    max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS,
    now: float | None = None,
) -> bool:
    """True when `signature` was made with `secret` over `timestamp` and `body`,
    and `timestamp` is within `max_age_seconds` of `now` (either way: a clock
    ahead by more than the window is refused too, or a request could be
    stored and replayed once its time comes)."""
    if not signature or not signature.startswith(_PREFIX):
        return False
    if not timestamp or not _TIMESTAMP.fullmatch(timestamp):
        return False
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > max_age_seconds:
        return False
    expected = sign(body, secret, timestamp).encode()
    # As bytes: compare_digest refuses str with non-ASCII characters.
    return hmac.compare_digest(expected, signature.encode("utf-8", "surrogatepass"))
