"""The ASGI application of the HTTP door: FastAPI's routes behind the hot routes.

The app opens nothing: the node that serves it (coordinator/node/) owns the
core and the authenticator, and the door (door.py) puts them on `app.state`
before the first request, where FastAPI's routes and HotRoutes find them.
"""

from __future__ import annotations

from fastapi import FastAPI

from coordinator import __version__
from coordinator.core.configs import HttpDoorConfig
from coordinator.http.api_docs import install_api_docs
from coordinator.http.checkback import router as checkback_router
from coordinator.http.consumers import router as consumers_router
from coordinator.http.errors import install_error_handlers
from coordinator.http.gate import Gate
from coordinator.http.hot_routes import HotRoutes
from coordinator.http.metrics import router as metrics_router
from coordinator.http.routes import router, table
from coordinator.http.status_page import install_status_page


def create_app(config: HttpDoorConfig) -> HotRoutes:
    """The app to serve: FastAPI behind the hot routes (see hot_routes.py)."""
    app = FastAPI(
        title="coordinator",
        version=__version__,
        description="Transactional messages (RocketMQ semantics) with all state in PostgreSQL.",
        # /docs from the package, not a CDN; no /redoc (api_docs.py)
        docs_url=None,
        redoc_url=None,
    )
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(consumers_router)
    app.include_router(checkback_router)
    app.include_router(metrics_router)
    install_status_page(app)
    install_api_docs(app)
    return HotRoutes(
        app, table.routes, max_bytes=config.max_request_bytes, gate=Gate.of(config.allowed_hosts)
    )
