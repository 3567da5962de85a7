"""The doors a node serves, as the settings configure them.

A new door is a module of its own (a context manager taking the core and
the authenticator) and one line here.
"""

from __future__ import annotations

import functools
import socket

from coordinator.config import Settings
from coordinator.http.door import running_http_door
from coordinator.node.running import Door


def configured_doors(settings: Settings, http_sockets: list[socket.socket]) -> list[Door]:
    """HTTP on the given sockets, and the RocketMQ gRPC door when grpc_port is set."""
    doors: list[Door] = [functools.partial(running_http_door, sockets=http_sockets)]
    if settings.grpc_port is not None:
        # Imported only then: its protocol modules load the RocketMQ client package.
        from coordinator.grpc.server import running_grpc_door

        doors.append(running_grpc_door)
    return doors
