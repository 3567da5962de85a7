"""The RocketMQ clients' `authorization` header, checked against the coordinator's tokens.

The clients sign each request: `MQv2-HMAC-SHA1 Credential=<access key>,
SignedHeaders=x-mq-date-time, Signature=<hex HMAC-SHA1(secret key,
x-mq-date-time)>`. The coordinator keeps only a hash of each token, so it
cannot know a secret apart from the token: a client is configured with the
token as both its access key and its secret key. The access key carries the
token (as a bearer header does over HTTP) and the signature proves the
secret key is the same token, so a key pair mixed up is told, not half
accepted. The Python client sends the header with an empty access key when
it has none: that is a request without a token.
"""

from __future__ import annotations

import functools
import hashlib
import hmac

from coordinator.domain.errors import Unauthenticated

SCHEME = "MQv2-HMAC-SHA1"
HOW_TO_SEND = (
    ": set the client's access key and secret key (ClientConfiguration credentials) "
    "both to a token from `coordinator tokens create`"
)


def _fields(value: str) -> dict[str, str]:
    fields = {}
    for part in value.split(","):
        name, _, field = part.strip().partition("=")
        fields[name.strip().lower()] = field.strip()
    return fields


def token_of(authorization: str | None, date_time: str | None) -> str | None:
    """The token an `authorization` header carries, None when it carries none.

    Raises Unauthenticated for a header that carries one badly.
    """
    if not authorization:
        return None
    return _checked(authorization, date_time or "")


# A client signs with the time to the second, so within a second every call of
# a client (and of all its threads) sends the same two headers again: the
# parse and the HMAC are done once for them. Only headers that pass are kept,
# keyed by both whole strings, so a kept answer is the one the check gives.
@functools.lru_cache(maxsize=1024)
def _checked(authorization: str, date_time: str) -> str | None:
    scheme, _, rest = authorization.strip().partition(" ")
    if scheme != SCHEME:
        raise Unauthenticated(f"the authorization header must use {SCHEME}{HOW_TO_SEND}")
    fields = _fields(rest)
    token = fields.get("credential", "")
    if not token:
        return None
    signature = fields.get("signature", "").lower()
    expected = hmac.new(token.encode(), date_time.encode(), hashlib.sha1).hexdigest()
    if not hmac.compare_digest(signature, expected):
        raise Unauthenticated(
            "the request's signature does not match its access key: the secret key must be "
            "the same token as the access key"
        )
    return token
