"""Every error answer of every route, in the OpenAPI document, derived in one place.

The routers build their routes as DocumentedRoutes: each adds to its
`responses` the error statuses that follow from what its endpoint takes,
all with the one error body (schemas.ErrorOut) and the shared descriptions
(schemas.ERROR_DESCRIPTIONS):

- every request: 400 (the gate, gate.py: two Authorization headers, a Host
  not answered), 408 (not received whole in time, protocol.py), 413
  (HotRoutes refuses any request declaring a body over max_request_bytes,
  before routing) and 429 (the server's open-connection limit, protocol.py);
  a write (any method but GET, HEAD, OPTIONS) also 403 (the gate: from
  another site's page; a GET of the API too, but a page's GET answers 403
  only there, so it is documented on writes);
- the core (a dependency returning Coordinator): 503, PostgreSQL away;
- the principal (security.principal, also through json_body): 401, 403, and
  429 for the token's rate and long polls;
- a body, or json_body on a method that sends one: 415;
- a body or any parameter (pydantic's validation): 422.

What only the route knows (404, 409, a 403 of its own) it declares itself
with `described({...})` or `errors(...)`; a route's own declaration of a
status wins over the derived one (/health's 503 also has its HealthOut).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import BackgroundTasks, params
from fastapi.routing import APIRoute
from fastapi.security import SecurityScopes
from pydantic import BaseModel
from starlette.requests import HTTPConnection
from starlette.responses import Response

from coordinator.core import Coordinator
from coordinator.http.gate import SAFE_METHODS
from coordinator.http.schemas import ERROR_DESCRIPTIONS, ErrorOut
from coordinator.http.security import BODY_METHODS, json_body, principal

Responses = dict[int | str, dict[str, Any]]

# PostgreSQL away (errors.py) says when to retry.
RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before sending the request again.",
        "schema": {"type": "integer"},
    }
}


def errors(*statuses: int) -> Responses:
    """`responses=` entries for error statuses, with their shared descriptions."""
    return described({status: ERROR_DESCRIPTIONS[status] for status in statuses})


def described(descriptions: dict[int, str]) -> Responses:
    """`responses=` entries for error statuses, each with a description of its own."""
    return {
        status: {
            "model": ErrorOut,
            "description": description,
            **({"headers": RETRY_AFTER} if status == 503 else {}),
        }
        for status, description in descriptions.items()
    }


def example(value: object) -> dict[str, dict[str, Any]]:
    """`openapi_examples=` of a parameter: one example, named by its value."""
    return {str(value): {"value": value}}


# What FastAPI hands an endpoint from the request itself, not from a parameter.
_SUPPLIED = (HTTPConnection, Response, BackgroundTasks, SecurityScopes)


@dataclass
class _Takes:
    """What a route's endpoint and its dependencies take, read from their signatures."""

    calls: set[Callable[..., Any]] = field(default_factory=set)
    body: bool = False
    parameters: bool = False  # path or query

    def read(self, call: Callable[..., Any]) -> None:
        self.calls.add(call)
        for parameter in inspect.signature(call, eval_str=True).parameters.values():
            annotation = parameter.annotation
            markers: list[Any] = [parameter.default]
            if typing.get_origin(annotation) is Annotated:
                annotation, *metadata = typing.get_args(annotation)
                markers += metadata
            depends = next((m for m in markers if isinstance(m, params.Depends)), None)
            if depends is not None:
                self.read(depends.dependency or annotation)
            elif isinstance(annotation, type) and issubclass(annotation, _SUPPLIED):
                continue
            elif any(isinstance(m, params.Body) for m in markers) or (
                isinstance(annotation, type) and issubclass(annotation, BaseModel)
            ):
                self.body = True
            elif not any(isinstance(m, params.Header | params.Cookie) for m in markers):
                self.parameters = True


def _returns_core(call: Callable[..., Any] | None) -> bool:
    try:
        return typing.get_type_hints(call).get("return") is Coordinator
    except Exception:  # a class, a builtin, an unresolvable hint: not the core
        return False


def derived_errors(
    endpoint: Callable[..., Any],
    dependencies: Sequence[params.Depends],
    methods: Sequence[str],
) -> dict[int, str]:
    """The error statuses a route can answer, from what it takes, with their descriptions."""
    takes = _Takes()
    takes.read(endpoint)
    for depends in dependencies:
        if depends.dependency is not None:
            takes.read(depends.dependency)
    calls, parameters, has_body = takes.calls, takes.parameters, takes.body
    statuses = {400, 408, 413, 429}
    if set(methods) - SAFE_METHODS:
        statuses.add(403)
    if any(_returns_core(call) for call in calls):
        statuses.add(503)
    if principal in calls:
        statuses |= {401, 403}
    if has_body or (json_body in calls and BODY_METHODS & set(methods)):
        statuses.add(415)
    if has_body or parameters:
        # Also for routes whose only parameters are plain strings, which
        # pydantic cannot refuse: FastAPI documents a 422 for any route with
        # parameters, and this states the body it really has.
        statuses.add(422)
    return {status: ERROR_DESCRIPTIONS[status] for status in sorted(statuses)}


class DocumentedRoute(APIRoute):
    """An APIRoute whose responses list every error status it can answer (see above)."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **options: Any) -> None:
        derived = derived_errors(
            endpoint, options.get("dependencies") or (), options.get("methods") or ()
        )
        options["responses"] = {**described(derived), **(options.get("responses") or {})}
        super().__init__(path, endpoint, **options)
