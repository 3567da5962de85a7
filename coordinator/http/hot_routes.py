"""The hot routes, dispatched without FastAPI's per-request machinery.

Every transactional message costs at least two requests (prepare, then end),
so what a request costs the server bounds the coordinator's throughput. On
these routes FastAPI's dispatch (middleware layers, dependency solving,
parsing the body into dicts and validating those) cost about 250 µs of CPU
per request, four times what uvicorn itself needs to read and answer one.

Every request first passes the gate (gate.py: one Authorization header, a
Host this server answers, no cross-origin browser write), here, so that the
hot routes and FastAPI's apply it alike. HotRoutes then answers the hot
routes directly: it authenticates the request (before reading the body, so
a request without a valid token costs next to nothing), reads the body,
checks that it is declared JSON (both with security.py, as FastAPI's
routes), validates it straight from the bytes with the route's body model
(`model_validate_json`, in pydantic-core), and calls the route's handler
with the core, the principal (the handler makes the permission check) and
the body. Every other request goes on to the FastAPI app.

Which routes are hot, and everything about them, is the route table's
(route_table.py): the same declaration registered the route with FastAPI,
so a hot route cannot drift from the route it stands for, and nothing here
reads FastAPI's internals. `Matcher` finds a request's hot route, the one
lookup both the dispatch and the tests use.

HotRoutes is the outermost app uvicorn serves, not a middleware inside
FastAPI: FastAPI wraps even its user middleware in four layers of its own
(error pages, telemetry, body limit, Starlette's dispatch), another 10% of
the server's CPU on these routes. An exception on a hot route reaches
uvicorn, which answers 500 and logs it, as FastAPI's error layer did.

Every HTTP request passes here, so here each is recorded, once
(request_record.py), by its route template: a hot route's is in its
declaration, FastAPI's router leaves the route it chose in the scope.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from fastapi import FastAPI
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import compile_path
from starlette.types import Message, Receive, Scope, Send

from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator
from coordinator.domain.errors import CoordinatorError
from coordinator.http.errors import core_error_response, error_response, validation_error_response
from coordinator.http.gate import Gate, RequestHeads, request_heads
from coordinator.http.request_record import REFUSED, TOO_LARGE, UNMATCHED, record
from coordinator.http.route_table import Route
from coordinator.http.security import is_json, not_json
from coordinator.metrics import Meter, RequestMeter


class _ClientLeft(Exception):
    """The connection ended before the request's body did."""


@dataclass(frozen=True, slots=True)
class _MethodTable:
    exact: dict[str, Route]  # routes without parameters, by path
    templated: tuple[tuple[re.Pattern[str], Route], ...]  # in the table's order


class Matcher:
    """The hot route of a request: exact paths by dict, templates by regex only after."""

    def __init__(self, routes: Iterable[Route]) -> None:
        exact: dict[str, dict[str, Route]] = {}
        templated: dict[str, list[tuple[re.Pattern[str], Route]]] = {}
        for route in routes:
            regex, _, convertors = compile_path(route.path)
            if convertors:
                templated.setdefault(route.method, []).append((regex, route))
            else:
                # FastAPI answers the first route declared for a path
                exact.setdefault(route.method, {}).setdefault(route.path, route)
        self._tables = {
            method: _MethodTable(exact.get(method, {}), tuple(templated.get(method, ())))
            for method in exact.keys() | templated.keys()
        }

    @property
    def routes(self) -> list[Route]:
        return [
            route
            for table in self._tables.values()
            for route in (*table.exact.values(), *(route for _, route in table.templated))
        ]

    def match(self, method: str, path: str) -> tuple[Route, dict[str, str] | None] | None:
        """The hot route for a request, with the raw path parameters of a templated one."""
        table = self._tables.get(method)
        if table is None:
            return None
        route = table.exact.get(path)
        if route is not None:
            return route, None
        for pattern, route in table.templated:
            if (found := pattern.match(path)) is not None:
                return route, found.groupdict()
        return None


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


class _Outcome:
    """What the request is recorded as: its route label (None: FastAPI's, from
    the scope) and status (500: what uvicorn answers if the app raises)."""

    __slots__ = ("route", "status")

    def __init__(self) -> None:
        self.route: str | None = None
        self.status = 500


class HotRoutes:
    """The served ASGI app: refuses oversized requests, answers the hot
    routes, and passes everything else to FastAPI."""

    def __init__(
        self, app: FastAPI, routes: Iterable[Route], max_bytes: int, gate: Gate | None = None
    ) -> None:
        self.app = app
        self.state = app.state
        self.max_bytes = max_bytes
        self.gate = gate or Gate()
        self.matcher = Matcher(route for route in routes if route.hot)
        # The core's, once attached; until then (an app only built, as a test's) its own.
        self.requests: RequestMeter = Meter().http

    def attach(self, core: Coordinator, authenticator: Authenticator) -> None:
        """What the routes serve with, on `app.state` where FastAPI's routes find them too.

        The door attaches the node's core and authenticator before it serves.
        """
        self.state.coordinator = core
        self.state.authenticator = authenticator
        self.requests = core.meter.http

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = perf_counter()
        outcome = _Outcome()
        try:
            await self._serve(scope, receive, send, outcome)
        finally:
            # FastAPI's router puts the route it chose into the scope; its path is the template.
            route = outcome.route or getattr(scope.get("route"), "path", None) or UNMATCHED
            record(self.requests, scope, route, outcome.status, perf_counter() - started)

    async def _serve(self, scope: Scope, receive: Receive, send: Send, outcome: _Outcome) -> None:
        heads = request_heads(scope["headers"])
        refused = self.gate.refusal(
            scope["method"],
            scope["path"],
            scope.get("scheme", "http"),
            heads,
            self.state.authenticator.enabled,
        )
        response: Response | None
        if refused is not None:
            outcome.route = REFUSED
            response = core_error_response(refused)
        elif (response := self._refuse_declared_size(heads.content_length)) is not None:
            outcome.route = TOO_LARGE
        elif (found := self.matcher.match(scope["method"], scope["path"])) is not None:
            route, params = found
            outcome.route = route.path
            response = await self._answer(route, params, heads, receive)
        else:
            await self._forward(scope, receive, send, heads, outcome)
            return
        outcome.status = response.status_code
        await response(scope, receive, send)

    async def _forward(
        self, scope: Scope, receive: Receive, send: Send, heads: RequestHeads, outcome: _Outcome
    ) -> None:
        """Hand the request to FastAPI, seeing the status it answers."""

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                outcome.status = message["status"]
            await send(message)

        if heads.content_length is None:
            # A chunked body declares no size: count it as FastAPI reads it.
            receive = self._size_limited(receive)
        await self.app(scope, receive, sending)

    def _size_limited(self, receive: Receive) -> Receive:
        """`receive`, refusing (413) a body once it exceeds max_bytes, before reading more."""
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                # Raised inside FastAPI's body read: its error handler answers
                # (nothing has been sent yet) and the rest is never read.
                raise HTTPException(413, f"at most {self.max_bytes} bytes are accepted")
            return message

        return limited

    def _refuse_declared_size(self, content_length: bytes | None) -> Response | None:
        """HTTP 413 for a Content-Length over max_bytes, before reading the body."""
        if (
            content_length is not None
            and content_length.isdigit()
            and int(content_length) > self.max_bytes
        ):
            return error_response(
                413,
                "request_too_large",
                f"the request has {content_length.decode()} bytes; "
                f"at most {self.max_bytes} are accepted",
            )
        return None

    async def _answer(
        self,
        route: Route,
        raw_params: dict[str, str] | None,
        heads: RequestHeads,
        receive: Receive,
    ) -> Response:
        # Who asks before reading the body: a request without a valid token
        # costs a header scan and a dict lookup.
        authenticator: Authenticator = self.state.authenticator
        try:
            caller = authenticator.authenticate(_text(heads.authorization))
        except CoordinatorError as error:
            return core_error_response(error)
        try:
            body = await self._read_body(receive)
        except _ClientLeft:
            # The body never arrived whole (the client left, or the server
            # gave up waiting for it): nothing is done with a part of it, and
            # the answer goes nowhere.
            return Response(status_code=400)
        if body is None:
            return error_response(
                413, "request_too_large", f"at most {self.max_bytes} bytes are accepted"
            )
        if body and not is_json(content_type := _text(heads.content_type)):
            return core_error_response(not_json(content_type))
        path_arguments: dict[str, Any] = {}
        if raw_params is not None:
            for name, validator in route.path_validators:
                try:
                    path_arguments[name] = validator.validate_python(raw_params[name])
                except ValidationError as error:
                    return validation_error_response(
                        [
                            {**item, "loc": ("path", name, *item["loc"])}
                            for item in error.errors(include_url=False)
                        ]
                    )
        try:
            parsed = route.body.model_validate_json(body)
        except ValidationError as error:
            return validation_error_response(error.errors(include_url=False))
        try:
            result = await route.handler(
                core=self.state.coordinator, caller=caller, body=parsed, **path_arguments
            )
        except CoordinatorError as error:
            return core_error_response(error)
        return route.respond(result)

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole request body, or None once it exceeds max_bytes.

        Raises _ClientLeft if the connection ends before the body does.
        """
        chunks: list[bytes] = []
        size = 0
        while True:
            message: Message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientLeft
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
