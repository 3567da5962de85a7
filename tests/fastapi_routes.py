"""FastAPI's own view of the app's routes, for the tests that compare the hot path with it."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute


def api_routes(app: FastAPI) -> list[Any]:
    """The app's APIRoutes with their effective paths, included routers expanded.

    FastAPI from 0.137 keeps an included router as one node of `app.routes`,
    which `iter_route_contexts` expands; older releases list the included
    routes themselves (iter_route_contexts is FastAPI's own, which the
    package does not read).
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
