"""The ASGI application. Its lifespan opens and closes the core's pool."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from coordinator import __version__
from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.core.check_scheduler import running_check_scheduler
from coordinator.http.checkback import router as checkback_router
from coordinator.http.consumers import router as consumers_router
from coordinator.http.errors import error_response, install_error_handlers
from coordinator.http.hot_routes import HotRoutes
from coordinator.http.routes import router


class RequestSizeLimit:
    """Refuse oversized requests before reading them (HTTP 413).

    A plain ASGI middleware: Starlette's BaseHTTPMiddleware would add a task
    and a stream copy to every request on the hot path.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for name, value in scope["headers"]:
                if name == b"content-length":
                    if value.isdigit() and int(value) > self.max_bytes:
                        response = error_response(
                            413,
                            "request_too_large",
                            f"the request has {value.decode()} bytes; "
                            f"at most {self.max_bytes} are accepted",
                        )
                        await response(scope, receive, send)
                        return
                    break
        await self.app(scope, receive, send)


def create_app(database_url: str, settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with Coordinator.connect(database_url, settings, listen=True) as core:
            app.state.coordinator = core
            async with running_check_scheduler(core):
                yield

    app = FastAPI(
        title="coordinator",
        version=__version__,
        description="Transactional messages (RocketMQ semantics) with all state in PostgreSQL.",
        lifespan=lifespan,
    )
    # Added last, so it runs first: the size check covers the hot routes too.
    app.add_middleware(HotRoutes, state=app.state, max_bytes=settings.max_request_bytes)
    app.add_middleware(RequestSizeLimit, max_bytes=settings.max_request_bytes)
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(consumers_router)
    app.include_router(checkback_router)
    return app


def app_from_environment() -> FastAPI:
    """The app of one `coordinator serve --workers N` process.

    The parent resolved the database (embedded or configured) and put every
    setting into COORDINATOR_* variables, which each worker reads back.
    """
    settings = Settings()
    if not settings.database_url:
        raise RuntimeError("COORDINATOR_DATABASE_URL must be set for serve workers")
    return create_app(settings.database_url, settings)
