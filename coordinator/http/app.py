"""The ASGI application. Its lifespan opens and closes the core's pool and
runs the authenticator, the check-back scheduler and, when grpc_port is set,
the RocketMQ gRPC door beside HTTP on the same core."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

from fastapi import FastAPI

from coordinator import __version__
from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator, running_authenticator
from coordinator.core.checkback.scheduler import running_check_scheduler
from coordinator.http.api_docs import install_api_docs
from coordinator.http.checkback import router as checkback_router
from coordinator.http.consumers import router as consumers_router
from coordinator.http.errors import install_error_handlers
from coordinator.http.hot_routes import HotRoutes
from coordinator.http.protocol import BEGIN_SHUTDOWN
from coordinator.http.routes import router
from coordinator.http.status_page import install_status_page


def create_app(database_url: str, settings: Settings | None = None) -> HotRoutes:
    """The app to serve: FastAPI behind the hot routes (see hot_routes.py)."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        async with Coordinator.connect(database_url, settings, listen=True) as core:
            app.state.coordinator = core
            async with running_authenticator(core.context, core.configs.auth) as authenticator:
                # On app.state, where FastAPI's routes and HotRoutes both find it.
                app.state.authenticator = authenticator
                async with (
                    running_check_scheduler(core.checkback.run_round, core.configs.scheduler),
                    _grpc_door(core, authenticator, settings),
                ):
                    try:
                        # uvicorn's protocol calls it as the server starts to
                        # stop, when requests are still in flight (protocol.py).
                        yield {BEGIN_SHUTDOWN: core.begin_shutdown}
                    finally:
                        # Before the door and the scheduler stop: their long
                        # polls and round end first.
                        core.begin_shutdown()

    app = FastAPI(
        title="coordinator",
        version=__version__,
        description="Transactional messages (RocketMQ semantics) with all state in PostgreSQL.",
        lifespan=lifespan,
        # /docs from the package, not a CDN; no /redoc (api_docs.py)
        docs_url=None,
        redoc_url=None,
    )
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(consumers_router)
    app.include_router(checkback_router)
    install_status_page(app)
    install_api_docs(app)
    return HotRoutes(app, max_bytes=settings.max_request_bytes)


def _grpc_door(
    core: Coordinator, authenticator: Authenticator, settings: Settings
) -> AbstractAsyncContextManager[object]:
    """The RocketMQ gRPC door, in this process on the same core, when grpc_port is set.

    Imported only then: its protocol modules load the RocketMQ client package.
    """
    if settings.grpc_port is None:
        return nullcontext()
    from coordinator.grpc.server import running_grpc_door

    return running_grpc_door(core, authenticator, settings)


def app_from_environment() -> HotRoutes:
    """The app of one `coordinator serve --workers N` process.

    The parent resolved the database (embedded or configured) and put every
    setting into COORDINATOR_* variables (Settings.to_environment), which
    each worker reads back.
    """
    settings = Settings.from_environment()
    if not settings.database_url:
        raise RuntimeError("COORDINATOR_DATABASE_URL must be set for serve workers")
    return create_app(settings.database_url, settings)
