"""The ASGI application. Its lifespan opens and closes the core's pool."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.responses import Response

from coordinator import __version__
from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.http.errors import error_response, install_error_handlers
from coordinator.http.routes import router


class RequestSizeLimit(BaseHTTPMiddleware):
    """Refuse oversized requests before reading them (HTTP 413)."""

    def __init__(self, app: object, max_bytes: int) -> None:
        super().__init__(app)  # type: ignore[arg-type]
        self.max_bytes = max_bytes

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            return error_response(
                413,
                "request_too_large",
                f"the request has {length} bytes; at most {self.max_bytes} are accepted",
            )
        return await call_next(request)


def create_app(database_url: str, settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with Coordinator.connect(database_url, settings, listen=True) as core:
            app.state.coordinator = core
            yield

    app = FastAPI(
        title="coordinator",
        version=__version__,
        description="Transactional messages (RocketMQ semantics) with all state in PostgreSQL.",
        lifespan=lifespan,
    )
    app.add_middleware(RequestSizeLimit, max_bytes=settings.max_request_bytes)
    install_error_handlers(app)
    app.include_router(router)
    return app
