"""The routes the door declares itself, each once: FastAPI and the hot path both read it.

A `Route` says everything the door needs to serve a request: method, path
and its parameters, the body model, the answer model, the handler and
whether the hot path (hot_routes.py) answers it without FastAPI. From the
one declaration:

- `RouteTable.route` registers it with FastAPI (the OpenAPI document, and
  the ordinary dispatch for a route that is not hot), through an endpoint
  whose signature is built from the declaration;
- hot_routes.HotRoutes builds its matcher from the table's hot routes and
  validates the path parameters with the declared types.

A handler takes the core, the caller's principal, the validated body and
the path parameters, makes the permission check that fits, and returns
what the answer model reads its fields from (a core result's attributes, or
a dict of them); `Route.respond` validates that as the answer model and
serialises it with pydantic's compiled serialiser, on both paths alike, so
an answer cannot say more or less than its model.
"""

from __future__ import annotations

import inspect
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
    body: type[BaseModel]
    answer: type[BaseModel]
    # (core, caller, body, **path parameters) -> what `answer` is read from
    handler: Handler
    hot: bool = False
    status_code: int = 200  # the success status the document declares
    # Picks the success status from the answer when it varies (an idempotent
    # retry answers 200 where a first send answers 201).
    status_of: Callable[[Any], int] | None = None
    # Each path parameter's name and declared type (with its constraints:
    # Annotated[str, Path(max_length=...)]), in the order of the path.
    path_parameters: tuple[tuple[str, Any], ...] = ()
    # What else FastAPI documents of the route: responses, tags, summary, ...
    openapi: Mapping[str, Any] = field(default_factory=dict)
    _validators: tuple[tuple[str, SchemaValidator], ...] = field(init=False, default=())

    def __post_init__(self) -> None:
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

    async def endpoint(
        body: BaseModel, core: Coordinator, caller: Principal, **path: Any
    ) -> Response:
        return route.respond(await route.handler(core, caller, body, **path))

    keyword = inspect.Parameter.KEYWORD_ONLY
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # inspect.signature reads it
        [
            inspect.Parameter("body", keyword, annotation=route.body),
            *(
                inspect.Parameter(name, keyword, annotation=annotation)
                for name, annotation in route.path_parameters
            ),
            inspect.Parameter(
                "core", keyword, default=Depends(coordinator), annotation=Coordinator
            ),
            inspect.Parameter("caller", keyword, default=Depends(principal), annotation=Principal),
        ]
    )
    endpoint.__name__ = endpoint.__qualname__ = route.name
    endpoint.__doc__ = route.handler.__doc__
    return endpoint


class RouteTable:
    """The declared routes of one router, in the order FastAPI tries them.

    The app includes the router without a prefix: the hot path serves the
    paths as declared.
    """

    def __init__(self, router: APIRouter) -> None:
        self.router = router
        self.routes: list[Route] = []

    def route(
        self,
        method: str,
        path: str,
        *,
        body: type[BaseModel],
        answer: type[BaseModel],
        hot: bool = False,
        status_code: int = 200,
        status_of: Callable[[Any], int] | None = None,
        path_parameters: Mapping[str, Any] | None = None,
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
                status_code=status_code,
                status_of=status_of,
                path_parameters=tuple((path_parameters or {}).items()),
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
