"""The hot routes, dispatched without FastAPI's per-request machinery.

Every transactional message costs at least two requests (prepare, then end),
so what a request costs the server bounds the coordinator's throughput. On
these routes FastAPI's dispatch (middleware layers, dependency solving,
parsing the body into dicts and validating those) cost about 250 µs of CPU
per request, four times what uvicorn itself needs to read and answer one.

Every request first passes the gate (gate.py: one Authorization header, a
Host this server answers, no cross-origin browser write), here, so that the
hot routes and FastAPI's apply it alike. HotRoutes then answers the hot
routes directly: it authenticates the request (before
reading the body, so a request without a valid token costs next to
nothing), reads the body, checks that it is declared JSON (both with
security.py, as FastAPI's routes), validates it straight from the bytes
with the route's own pydantic model (`model_validate_json`, in
pydantic-core), and calls the route's own endpoint function from routes.py
with the body, the core and the principal, which makes the route's
permission check. FastAPI still declares and
documents these routes (OpenAPI); only the dispatch is skipped. Every
other request goes on to the FastAPI app.

Which routes are hot is marked once, with `routes.hot` on the endpoint; the
table is built at startup from the FastAPI app's own routes (path, methods,
body model, path parameters), so a hot route cannot drift from the route it
stands for. An endpoint that needs more than HotRoutes supplies (query or
header parameters, dependencies other than the core and the principal, the
request) is refused at startup.

HotRoutes is the outermost app uvicorn serves, not a middleware inside
FastAPI: FastAPI wraps even its user middleware in four layers of its own
(error pages, telemetry, body limit, Starlette's dispatch), another 10% of
the server's CPU on these routes. An exception on a hot route reaches
uvicorn, which answers 500 and logs it, as FastAPI's error layer did.

Every HTTP request passes here, so here each is counted and timed by its
route template (metrics.py) and gets its access line (logs.py): a hot route's
template is in its table, FastAPI's router leaves the route it chose in the
scope.

Long on purpose: the table built at startup and the dispatch that reads it
are one hot path and change together; apart, each would need the other's
internals.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Annotated, Any

from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.convertors import StringConvertor
from starlette.exceptions import HTTPException
from starlette.responses import Response
from starlette.routing import compile_path
from starlette.types import Message, Receive, Scope, Send

from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator
from coordinator.domain.errors import CoordinatorError
from coordinator.http.errors import core_error_response, error_response, validation_error_response
from coordinator.http.gate import Gate, RequestHeads, request_heads
from coordinator.http.routes import HOT_ENDPOINTS, coordinator
from coordinator.http.security import is_json, not_json, principal
from coordinator.logs import ACCESS, access_line
from coordinator.metrics import Meter, RequestMeter

Endpoint = Callable[..., Awaitable[Response]]

# The route label of requests no route took (404s), and of bodies refused for
# their declared size before any route was looked at.
UNMATCHED = "(unmatched)"
TOO_LARGE = "(too large)"
# ... and of requests the gate refused (gate.py) before any route was looked at.
REFUSED = "(refused)"


class _ClientLeft(Exception):
    """The connection ended before the request's body did."""


@dataclass(frozen=True, slots=True)
class HotRoute:
    path: str  # the template, as the FastAPI route declares it
    pattern: re.Pattern[str] | None  # compiled from the template; None without parameters
    endpoint: Endpoint
    body_model: type[BaseModel]
    body_param: str  # the keywords the endpoint takes the body and the core as
    core_param: str
    # Each path parameter's name and the pydantic-core validator of its declared
    # type and constraints (Path(max_length=...)).
    path_params: tuple[tuple[str, Any], ...] = ()
    # The keyword it takes the principal as; None if it needs no permission
    # check (the request is authenticated all the same).
    principal_param: str | None = None


@dataclass(frozen=True, slots=True)
class MethodTable:
    exact: dict[str, HotRoute]  # routes without parameters, by path
    templated: tuple[HotRoute, ...]  # in the app's order, as FastAPI tries them


def api_routes(app: FastAPI) -> list[Any]:
    """The app's APIRoutes with their effective paths, included routers expanded.

    FastAPI from 0.137 keeps an included router as one node of `app.routes`,
    which `iter_route_contexts` expands; older releases (pyproject.toml allows
    them) list the included routes themselves.
    """
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:
        return [route for route in app.routes if isinstance(route, APIRoute)]
    return [
        context
        for context in iter_route_contexts(app.routes)
        if isinstance(context.original_route, APIRoute)
    ]


# What FastAPI can hand an endpoint that HotRoutes does not.
_UNSUPPLIED = (
    "query_params",
    "header_params",
    "cookie_params",
    "request_param_name",
    "websocket_param_name",
    "http_connection_param_name",
    "response_param_name",
    "background_tasks_param_name",
    "security_scopes_param_name",
)


def hot_route(route: Any) -> HotRoute:
    """The HotRoute for one FastAPI route, or TypeError if HotRoutes cannot
    serve it exactly as FastAPI would."""
    dependant = route.dependant

    def refuse(why: str) -> TypeError:
        return TypeError(
            f"hot route {route.endpoint.__qualname__} ({route.path}): {why}; "
            "serve it through FastAPI (drop @hot)"
        )

    for needed in _UNSUPPLIED:
        if getattr(dependant, needed, None):
            raise refuse(f"it takes {needed.removesuffix('_param_name').replace('_', ' ')}")
    supplied: dict[Any, list[str]] = {coordinator: [], principal: []}
    for dependency in dependant.dependencies:
        if dependency.call not in supplied or not dependency.name:
            raise refuse(
                f"it depends on {dependency.call!r}; only the core and the principal are supplied"
            )
        supplied[dependency.call].append(dependency.name)
    if len(supplied[coordinator]) != 1:
        raise refuse("it must take the core once (Depends(routes.coordinator))")
    if len(supplied[principal]) > 1:
        raise refuse("it takes the principal more than once")
    if len(dependant.body_params) != 1:
        raise refuse("it needs exactly one body parameter")
    body = dependant.body_params[0]
    model = body.field_info.annotation
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise refuse(f"its body is {model!r}, not a pydantic model")
    if route.body_field is None or route.body_field.field_info.annotation is not model:
        raise refuse("its body is embedded in an object")
    regex, _, convertors = compile_path(route.path)
    if any(not isinstance(convertor, StringConvertor) for convertor in convertors.values()):
        raise refuse("its path has a typed parameter ({name:type})")
    path_params = []
    for param in dependant.path_params:
        if param.alias != param.name or param.alias not in convertors:
            raise refuse(f"its path parameter {param.name} is not {{{param.name}}} in the path")
        declared = Annotated[param.field_info.annotation, param.field_info]  # type: ignore[name-defined]  # built at run time, for pydantic
        path_params.append((param.name, TypeAdapter(declared).validator))
    return HotRoute(
        path=route.path,
        pattern=regex if convertors else None,
        endpoint=route.endpoint,
        body_model=model,
        body_param=body.name,
        core_param=supplied[coordinator][0],
        path_params=tuple(path_params),
        principal_param=supplied[principal][0] if supplied[principal] else None,
    )


def hot_table(app: FastAPI) -> dict[str, MethodTable]:
    """The routes of `app` whose endpoints are marked hot, by method."""
    exact: dict[str, dict[str, HotRoute]] = {}
    templated: dict[str, list[HotRoute]] = {}
    for route in api_routes(app):
        if route.endpoint not in HOT_ENDPOINTS:
            continue
        served = hot_route(route)
        for method in route.methods:
            if served.pattern is not None:
                templated.setdefault(method, []).append(served)
            else:
                # FastAPI answers the first route declared for a path
                exact.setdefault(method, {}).setdefault(route.path, served)
    return {
        method: MethodTable(exact.get(method, {}), tuple(templated.get(method, ())))
        for method in exact.keys() | templated.keys()
    }


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


def answered(scope: Scope, route: str, status: int, started: float, requests: RequestMeter) -> None:
    """Count and time a request by its route template (with the core's meter of HTTP
    requests), and write its access line."""
    seconds = perf_counter() - started
    method = scope["method"]
    requests.observe((method, route, status), 2, seconds)
    if ACCESS.isEnabledFor(logging.INFO):
        path = scope["path"]
        if query := scope.get("query_string"):
            path = f"{path}?{query.decode('latin-1')}"
        client = scope.get("client")
        milliseconds = round(seconds * 1000, 3)
        access_line(
            "%s %s %d %.1f ms",
            (method, path, status, milliseconds),
            {
                "method": method,
                "path": path,
                "route": route,
                "status": status,
                "duration_ms": milliseconds,
                "client": client[0] if client else None,
            },
        )


class HotRoutes:
    """The served ASGI app: refuses oversized requests, answers the hot
    routes, and passes everything else to FastAPI."""

    def __init__(self, app: FastAPI, max_bytes: int, gate: Gate | None = None) -> None:
        self.app = app
        self.state = app.state
        self.max_bytes = max_bytes
        self.gate = gate or Gate()
        self.table = hot_table(app)
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
        heads = request_heads(scope["headers"])
        refused = self.gate.refusal(
            scope["method"],
            scope["path"],
            scope.get("scheme", "http"),
            heads,
            self.state.authenticator.enabled,
        )
        if refused is not None:
            response: Response = core_error_response(refused)
            await response(scope, receive, send)
            answered(scope, REFUSED, response.status_code, started, self.requests)
            return
        refusal = self._refuse_declared_size(heads.content_length)
        if refusal is not None:
            await refusal(scope, receive, send)
            answered(scope, TOO_LARGE, refusal.status_code, started, self.requests)
            return
        table = self.table.get(scope["method"])
        if table is not None:
            # match(), inline: on the hot path the call would cost more than the lookup
            path = scope["path"]
            route = table.exact.get(path)
            params = None
            if route is None:
                for candidate in table.templated:
                    if (found := candidate.pattern.match(path)) is not None:  # type: ignore[union-attr]  # a templated route has its pattern
                        route, params = candidate, found.groupdict()
                        break
            if route is not None:
                status = 500  # what uvicorn answers if the route raises
                try:
                    response = await self._answer(route, params, heads, receive)
                    status = response.status_code
                    await response(scope, receive, send)
                finally:
                    answered(scope, route.path, status, started, self.requests)
                return
        if heads.content_length is None:
            # A chunked body declares no size: count it as FastAPI reads it.
            receive = self._size_limited(receive)
        await self._forward(scope, receive, send, started)

    async def _forward(self, scope: Scope, receive: Receive, send: Send, started: float) -> None:
        """Hand the request to FastAPI, seeing the status it answers and the route it took."""
        status = 500  # what uvicorn answers if the app raises before answering

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            # The router puts the route it chose into the scope; its path is the template.
            route = getattr(scope.get("route"), "path", None)
            answered(scope, route or UNMATCHED, status, started, self.requests)

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

    def match(self, method: str, path: str) -> tuple[HotRoute, dict[str, str] | None] | None:
        """The hot route for a request, with the raw path parameters of a
        templated one: exact paths by dict, regexes only after."""
        table = self.table.get(method)
        if table is None:
            return None
        route = table.exact.get(path)
        if route is not None:
            return route, None
        for route in table.templated:
            if (found := route.pattern.match(path)) is not None:  # type: ignore[union-attr]  # a templated route has its pattern
                return route, found.groupdict()
        return None

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
        route: HotRoute,
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
            for name, validator in route.path_params:
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
            parsed = route.body_model.model_validate_json(body)
        except ValidationError as error:
            return validation_error_response(error.errors(include_url=False))
        if route.principal_param is not None:
            path_arguments[route.principal_param] = caller
        try:
            return await route.endpoint(
                **{route.body_param: parsed, route.core_param: self.state.coordinator},
                **path_arguments,
            )
        except CoordinatorError as error:
            return core_error_response(error)

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole request body, or None once it exceeds max_bytes.

        Raises _ClientLeft if the connection ends before the body does.
        """
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
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
