"""Who sends a request, and that its body is JSON: the checks every route makes first.

`principal` authenticates the bearer token (core/auth.py: a dictionary
lookup, and the token's rate limit); each route then makes the permission
check that fits it (domain/access.py). HotRoutes makes the same two checks
itself (the same authenticator, `is_json` and `not_json`) for the routes
it serves, and hands their endpoints the principal.

A body must be declared JSON (application/json or application/*+json):
browsers send text/plain and untyped bodies cross-site without a CORS
preflight, so a route that parsed them anyway could be driven by any web
page its user visits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from coordinator.core.auth import Authenticator
from coordinator.domain.access import Principal
from coordinator.http.errors import UnsupportedMediaType
from coordinator.http.gate import duplicate_authorization

# Only documents the scheme in OpenAPI (/docs): `principal` reads the header
# itself, so a malformed one gets the authenticator's sentence.
_bearer = HTTPBearer(
    auto_error=False,
    description="A token from `coordinator tokens create`; not needed while none exists "
    "on a server listening on loopback.",
)

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


async def principal(
    request: Request, _: HTTPAuthorizationCredentials | None = Depends(_bearer)
) -> Principal:
    # async on purpose (see routes.coordinator): no thread hop for a dict lookup.
    authenticator: Authenticator = request.app.state.authenticator
    # The gate (gate.py) refused two headers already; this route must not
    # pick one either if it is ever served without it.
    given = request.headers.getlist("authorization")
    if (refused := duplicate_authorization(len(given))) is not None:
        raise refused
    return authenticator.authenticate(given[0] if given else None)


@contextmanager
def long_poll(request: Request, caller: Principal, wait_seconds: float) -> Iterator[None]:
    """One of the caller's long polls (RateLimited when it holds too many).

    A request that does not wait (wait_seconds 0) is no long poll and counts nothing.
    """
    if wait_seconds <= 0:
        yield
        return
    authenticator: Authenticator = request.app.state.authenticator
    with authenticator.limits.long_poll(caller):
        yield


def is_json(content_type: str | None) -> bool:
    if content_type is None:
        return False
    media_type = content_type.partition(";")[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def not_json(content_type: str | None) -> UnsupportedMediaType:
    given = f"{content_type!r}" if content_type else "no content type"
    return UnsupportedMediaType(
        f"the request body must be JSON, sent with 'Content-Type: application/json' "
        f"(this one has {given})"
    )


async def json_body(request: Request, _: Principal = Depends(principal)) -> None:
    """HTTP 415 for a body that is not declared JSON.

    It depends on `principal` (solved once per request, FastAPI caches it)
    so that an unauthenticated request is refused as such first, as on the
    hot routes.
    """
    if request.method not in BODY_METHODS:
        return
    content_type = request.headers.get("content-type")
    # FastAPI read the body already for a route that takes one (cached on
    # the request); what a route without one is sent is read here.
    if not is_json(content_type) and await request.body():
        raise not_json(content_type)
