"""Signatures of pushed check requests (HMAC-SHA256 over the raw body).

The coordinator sends `X-Coordinator-Signature: sha256=<hex digest>`; a push
producer recomputes it over the exact bytes it received with the shared
secret (`check_push_secret`) and refuses the request when they differ.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Coordinator-Signature"
_PREFIX = "sha256="


def sign(body: bytes, secret: str) -> str:
    """The header value for `body`."""
    return _PREFIX + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(body: bytes, secret: str, signature: str | None) -> bool:
    """True when `signature` (the header value) was made with `secret` over `body`."""
    if not signature or not signature.startswith(_PREFIX):
        return False
    return hmac.compare_digest(sign(body, secret), signature)
