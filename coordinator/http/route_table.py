"""The routes the door declares itself, each once: FastAPI and the hot path both read it.

A `Route` says everything the door needs to serve a request: method, path
and its parameters, its query parameters, the body model (if it takes one),
the answer model (none for a 204), the handler and whether the hot path
(hot_routes.py) answers it without FastAPI. From the one declaration:

- `RouteTable.route` registers it with FastAPI (the OpenAPI document, and
  the ordinary dispatch for a route that is not hot), through an endpoint
  whose signature is built from the declaration;
- hot_routes.HotRoutes builds its matcher from the table's hot routes and
  validates the path parameters with the declared types.

A handler takes the core, the caller's principal (none on a public route),
the validated body, the path and query parameters (and the request, for a
long poll), by name, makes the permission check that fits, and returns
what the answer model reads its fields from (a core result's attributes, or
a dict of them); `Route.respond` validates that as the answer model and
serialises it with pydantic's compiled serialiser, on both paths alike, so
an answer cannot say more or less than its model.

Every JSON route of the API is declared here. What answers no JSON model
stays a plain FastAPI route: /metrics (Prometheus text, authenticated by
its own rule: metrics_open lets a scraper in without a token), the status
page and /docs (HTML, no token), and their static files.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, TypeAdapter
from pydantic_core import SchemaValidator
from starlette.convertors import StringConvertor
from starlette.responses import Response
from starlette.routing import compile_path

from coordinator.core import Coordinator
from coordinator.domain.access import Principal
from coordinator.http.security import principal

Handler = Callable[..., Awaitable[Any]]
HandlerT = TypeVar("HandlerT", bound=Handler)


async def coordinator(request: Request) -> Coordinator:
    # async on purpose: FastAPI runs a plain `def` dependency in a thread
    # pool, a thread hop on every request for what is an attribute read.
    return request.app.state.coordinator


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str  # the template: {name} parameters, untyped
    # The body model; `Model | None` for an optional body, None for no body.
    body: Any
    answer: type[BaseModel] | None  # None: no content (a 204)
    # (core=, caller=, body=, request=, **parameters) -> what `answer` is read from
    handler: Handler
    hot: bool = False
    public: bool = False  # no principal: answered without a token (/health)
    takes_request: bool = False  # the handler takes the request (a long poll's limits)
    status_code: int = 200  # the success status the document declares
    # Picks the success status from the answer when it varies (an idempotent
    # retry answers 200 where a first send answers 201).
    status_of: Callable[[Any], int] | None = None
    # Each path parameter's name and declared type (with its constraints:
    # Annotated[str, Path(max_length=...)]), in the order of the path.
    path_parameters: tuple[tuple[str, Any], ...] = ()
    # Each query parameter's name, declared type and default (a value, or
    # Query(default=..., ...)), in the order the document lists them.
    query_parameters: tuple[tuple[str, Any, Any], ...] = ()
    # What else FastAPI documents of the route: responses, tags, summary, ...
    openapi: Mapping[str, Any] = field(default_factory=dict)
    _validators: tuple[tuple[str, SchemaValidator], ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        # The hot path reads a body, path parameters and the principal, and
        # solves no FastAPI dependency.
        if self.hot and (
            self.body is None
            or self.public
            or self.takes_request
            or self.query_parameters
            or self.openapi.get("dependencies")
        ):
            raise TypeError(f"{self.path}: the hot path serves authenticated bodies only")
        _, _, convertors = compile_path(self.path)
        if any(not isinstance(convertor, StringConvertor) for convertor in convertors.values()):
            raise TypeError(
                f"{self.path}: a path parameter is typed ({{name:type}}); "
                "declare its type in path_parameters"
            )
        declared = [name for name, _ in self.path_parameters]
        if declared != list(convertors):
            raise TypeError(
                f"{self.path}: path_parameters {declared} are not the path's {list(convertors)}"
            )
        validators = tuple(
            (name, TypeAdapter(annotation).validator) for name, annotation in self.path_parameters
        )
        object.__setattr__(self, "_validators", validators)

    @property
    def name(self) -> str:
        return self.handler.__name__

    @property
    def path_validators(self) -> tuple[tuple[str, SchemaValidator], ...]:
        """Each path parameter's name and the pydantic-core validator of its declared type."""
        return self._validators

    def respond(self, result: Any) -> Response:
        """The answer to a handler's result: validated as `answer`, serialised to JSON bytes."""
        if self.answer is None:
            return Response(status_code=self.status_code)
        answer = self.answer.model_validate(result, from_attributes=True)
        status = self.status_code if self.status_of is None else self.status_of(answer)
        return Response(
            self.answer.__pydantic_serializer__.to_json(answer),
            status_code=status,
            media_type="application/json",
        )


def created_or_found(answer: Any) -> int:
    """201 for a message stored by this request, 200 for an earlier one with its id."""
    return 201 if answer.created else 200


def _fastapi_endpoint(route: Route) -> Callable[..., Awaitable[Response]]:
    """The endpoint FastAPI calls for `route`: its signature is the declaration's."""

    async def endpoint(**arguments: Any) -> Response:
        return route.respond(await route.handler(**arguments))

    keyword = inspect.Parameter.KEYWORD_ONLY
    parameters = []
    if route.takes_request:
        parameters.append(inspect.Parameter("request", keyword, annotation=Request))
    if route.body is not None:
        optional = type(None) in typing.get_args(route.body)
        parameters.append(
            inspect.Parameter(
                "body",
                keyword,
                annotation=route.body,
                default=None if optional else inspect.Parameter.empty,
            )
        )
    parameters += [
        inspect.Parameter(name, keyword, annotation=annotation)
        for name, annotation in route.path_parameters
    ]
    parameters += [
        inspect.Parameter(name, keyword, annotation=annotation, default=default)
        for name, annotation, default in route.query_parameters
    ]
    parameters.append(
        inspect.Parameter("core", keyword, default=Depends(coordinator), annotation=Coordinator)
    )
    if not route.public:
        parameters.append(
            inspect.Parameter("caller", keyword, default=Depends(principal), annotation=Principal)
        )
    endpoint.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]  # inspect.signature reads it
    endpoint.__name__ = endpoint.__qualname__ = route.name
    endpoint.__doc__ = route.handler.__doc__
    return endpoint


class RouteTable:
    """The declared routes of one router, in the order FastAPI tries them.

    The app includes the router without a prefix: the hot path serves the
    paths as declared. A `section` registers its routes with a router of its
    own (its tags, its dependencies) into the same table.
    """

    def __init__(self, router: APIRouter, routes: list[Route] | None = None) -> None:
        self.router = router
        self.routes: list[Route] = [] if routes is None else routes

    def section(self, router: APIRouter) -> RouteTable:
        """The same table, registering the routes declared through it with `router`."""
        return RouteTable(router, self.routes)

    def route(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        answer: type[BaseModel] | None,
        hot: bool = False,
        public: bool = False,
        takes_request: bool = False,
        status_code: int = 200,
        status_of: Callable[[Any], int] | None = None,
        path_parameters: Mapping[str, Any] | None = None,
        query_parameters: Mapping[str, tuple[Any, Any]] | None = None,
        **openapi: Any,
    ) -> Callable[[HandlerT], HandlerT]:
        """Declare the route `handler` serves, and register it with the router."""

        def declare(handler: HandlerT) -> HandlerT:
            route = Route(
                method=method,
                path=path,
                body=body,
                answer=answer,
                handler=handler,
                hot=hot,
                public=public,
                takes_request=takes_request,
                status_code=status_code,
                status_of=status_of,
                path_parameters=tuple((path_parameters or {}).items()),
                query_parameters=tuple(
                    (name, annotation, default)
                    for name, (annotation, default) in (query_parameters or {}).items()
                ),
                openapi=openapi,
            )
            self.router.add_api_route(
                path,
                _fastapi_endpoint(route),
                methods=[method],
                response_model=answer,
                status_code=status_code,
                name=route.name,
                **openapi,
            )
            self.routes.append(route)
            return handler

        return declare

    @property
    def hot(self) -> list[Route]:
        return [route for route in self.routes if route.hot]
