"""The HTTP door: uvicorn serving the app on the node's listening sockets.

The node starts it after the core, the authenticator and the scheduler, and
stops it before them; the door opens nothing of the core's itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn

from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator
from coordinator.core.configs import HttpDoorConfig
from coordinator.domain.errors import DoorFailed
from coordinator.http.app import create_app
from coordinator.http.protocol import CoalescingHttpToolsProtocol
from coordinator.metrics import RequestMeter


class _NodeServer(uvicorn.Server):
    """uvicorn's server without its signal handling: the node decides when the door stops."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def server_config(
    app: Any,
    config: HttpDoorConfig,
    *,
    protocol: Callable[..., asyncio.Protocol] | None = None,
    requests: RequestMeter | None = None,
) -> uvicorn.Config:
    """How uvicorn serves the app: the coordinator's protocol, limits and TLS; `requests`
    counts what the protocol answers itself."""
    options: dict[str, Any] = {
        # The node's process configured logging (logs.py); uvicorn's access
        # log stays off: the coordinator writes its own, with route templates
        # and durations (logs.py, setting access_log).
        "log_config": None,
        "log_level": "warning",
        "access_log": False,
        # The node owns the lifetime of what the app serves with.
        "lifespan": "off",
        # uvicorn calls the protocol class with keywords only, so a partial
        # carries the limits.
        "http": protocol
        or functools.partial(
            CoalescingHttpToolsProtocol,
            max_connections=config.max_connections,
            request_read_timeout=config.request_read_timeout_seconds,
            requests=requests,
        ),
        # The coordinator never reads the client's address, which is all that
        # uvicorn's proxy-header middleware would parse every request for.
        "proxy_headers": False,
    }
    if config.tls_cert_file and config.tls_key_file:
        options["ssl_certfile"] = str(config.tls_cert_file)
        options["ssl_keyfile"] = str(config.tls_key_file)
    return uvicorn.Config(app, **options)


class HttpDoor:
    """A serving HTTP door, as the node sees it."""

    def __init__(self, server: uvicorn.Server, serving: asyncio.Task[None]) -> None:
        self._server = server
        self.ended: asyncio.Task[None] = serving

    def hurry(self) -> None:
        """Stop waiting for the requests in flight (a second Ctrl-C)."""
        self._server.force_exit = True

    @property
    def open_connections(self) -> int:
        return len(self._server.server_state.connections)


@asynccontextmanager
async def running_http_door(
    core: Coordinator,
    authenticator: Authenticator,
    sockets: list[socket.socket],
    *,
    protocol: Callable[..., asyncio.Protocol] | None = None,
) -> AsyncIterator[HttpDoor]:
    """Serve the HTTP API on `sockets` (bound and listening).

    `ended` finishes on its own only if uvicorn stops by itself; on exit the
    door stops taking connections, lets the requests in flight finish, and
    closes.
    """
    config = core.configs.http
    app = create_app(config)
    app.attach(core, authenticator)
    server = _NodeServer(server_config(app, config, protocol=protocol, requests=core.meter.http))
    serving = asyncio.create_task(server.serve(sockets=sockets), name="coordinator-http")
    while not server.started:
        if serving.done():
            serving.result()  # uvicorn's own error, if it raised one
            raise DoorFailed("the HTTP door did not start: see the error above")
        await asyncio.sleep(0.01)
    try:
        yield HttpDoor(server, serving)
    finally:
        server.should_exit = True
        await serving
