"""The hot routes, dispatched without FastAPI's per-request machinery.

Every transactional message costs at least two requests (prepare, then end),
so what a request costs the server bounds the coordinator's throughput. On
these routes FastAPI's dispatch (middleware layers, dependency solving,
parsing the body into dicts and validating those) cost about 250 µs of CPU
per request, four times what uvicorn itself needs to read and answer one.

HotRoutes answers them directly: it reads the body, validates it straight
from the bytes with the route's own pydantic model (`model_validate_json`,
in pydantic-core), and calls the route's own endpoint function from
routes.py. FastAPI still declares and documents these routes (OpenAPI); only
the dispatch is skipped. Every other request goes on to the FastAPI app.

HotRoutes is the outermost app uvicorn serves, not a middleware inside
FastAPI: FastAPI wraps even its user middleware in four layers of its own
(error pages, telemetry, body limit, Starlette's dispatch), another 10% of
the server's CPU on these routes. An exception on a hot route reaches
uvicorn, which answers 500 and logs it, as FastAPI's error layer did.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ValidationError
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from coordinator.core import Coordinator
from coordinator.domain.errors import CoordinatorError
from coordinator.domain.rules import ID_MAX_LENGTH
from coordinator.http import routes
from coordinator.http.errors import core_error_response, error_response, validation_error_response
from coordinator.http.schemas import BatchIn, EndBatchIn, EndIn, MessageIn

Endpoint = Callable[..., Awaitable[Response]]

# /v1/transactions/{transaction_id}/end, as FastAPI matches it: one path segment.
END_PATH = re.compile(r"/v1/transactions/(?P<transaction_id>[^/]+)/end")


@dataclass(frozen=True)
class HotRoute:
    endpoint: Endpoint
    body_model: type[BaseModel]


# POST routes by exact path; the end route is matched by END_PATH.
HOT_ROUTES: dict[str, HotRoute] = {
    "/v1/transactions": HotRoute(routes.prepare, MessageIn),
    "/v1/transactions/batch": HotRoute(routes.prepare_batch, BatchIn),
    "/v1/transactions/end-batch": HotRoute(routes.end_batch, EndBatchIn),
    "/v1/messages": HotRoute(routes.send, MessageIn),
    "/v1/messages/batch": HotRoute(routes.send_batch, BatchIn),
}
END_ROUTE = HotRoute(routes.end, EndIn)


class HotRoutes:
    """The served ASGI app: refuses oversized requests, answers the hot POST
    routes, and passes everything else (and the lifespan) to FastAPI."""

    def __init__(self, app: FastAPI, max_bytes: int) -> None:
        self.app = app
        self.state = app.state  # the lifespan puts the core there
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refuse_declared_size(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        if scope["method"] == "POST":
            path: str = scope["path"]
            route = HOT_ROUTES.get(path)
            path_params: dict[str, str] = {}
            if route is None and (match := END_PATH.fullmatch(path)) is not None:
                route, path_params = END_ROUTE, match.groupdict()
            if route is not None:
                response = await self._answer(route, path_params, receive)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _refuse_declared_size(self, scope: Scope) -> Response | None:
        """HTTP 413 for a Content-Length over max_bytes, before reading the body."""
        for name, value in scope["headers"]:
            if name == b"content-length":
                if value.isdigit() and int(value) > self.max_bytes:
                    return error_response(
                        413,
                        "request_too_large",
                        f"the request has {value.decode()} bytes; "
                        f"at most {self.max_bytes} are accepted",
                    )
                break
        return None

    async def _answer(
        self, route: HotRoute, path_params: dict[str, str], receive: Receive
    ) -> Response:
        body = await self._read_body(receive)
        if body is None:
            return error_response(
                413, "request_too_large", f"at most {self.max_bytes} bytes are accepted"
            )
        transaction_id = path_params.get("transaction_id")
        if transaction_id is not None and len(transaction_id) > ID_MAX_LENGTH:
            return validation_error_response(
                [
                    {
                        "loc": ("path", "transaction_id"),
                        "msg": f"String should have at most {ID_MAX_LENGTH} characters",
                    }
                ]
            )
        try:
            parsed = route.body_model.model_validate_json(body)
        except ValidationError as error:
            return validation_error_response(error.errors(include_url=False))
        core: Coordinator = self.state.coordinator
        try:
            return await route.endpoint(parsed, core=core, **path_params)
        except CoordinatorError as error:
            return core_error_response(error)

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole request body, or None once it exceeds max_bytes."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message: dict[str, Any] = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
