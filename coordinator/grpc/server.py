"""The gRPC server of the RocketMQ door, run beside HTTP in one process on one core."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator
from coordinator.grpc.service import MessagingService
from coordinator.grpc.stubs import load

log = logging.getLogger(__name__)

# Streams get this long to finish at shutdown; then they are cancelled.
STOP_GRACE_SECONDS = 1.0


class GrpcPortUnavailable(RuntimeError):
    pass


def listen_address(host: str, port: int) -> str:
    bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"{bracketed}:{port}"


@asynccontextmanager
async def running_grpc_door(
    core: Coordinator, authenticator: Authenticator, settings: Settings
) -> AsyncIterator[MessagingService]:
    """Serve `apache.rocketmq.v2.MessagingService` on settings.host:settings.grpc_port."""
    assert settings.grpc_port is not None
    stubs = load()
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", settings.max_request_bytes),
            ("grpc.max_send_message_length", settings.max_request_bytes),
        ]
    )
    service = MessagingService(core, authenticator, settings, stubs, port=settings.grpc_port)
    stubs.service_grpc.add_MessagingServiceServicer_to_server(service, server)
    address = listen_address(settings.host, settings.grpc_port)
    try:
        if settings.tls_cert_file and settings.tls_key_file:
            credentials = grpc.ssl_server_credentials(
                [(settings.tls_key_file.read_bytes(), settings.tls_cert_file.read_bytes())]
            )
            server.add_secure_port(address, credentials)
        else:
            server.add_insecure_port(address)
    except RuntimeError as error:
        raise GrpcPortUnavailable(f"cannot listen for gRPC on {address}: {error}") from None
    await server.start()
    try:
        yield service
    finally:
        await server.stop(STOP_GRACE_SECONDS)
        await service.close()
