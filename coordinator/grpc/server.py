"""The gRPC server of the RocketMQ door, run beside HTTP in one process on one core."""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator
from coordinator.grpc.service import MessagingService
from coordinator.grpc.status import Unreadable
from coordinator.grpc.stubs import Stubs, load

log = logging.getLogger(__name__)

SERVICE_NAME = "apache.rocketmq.v2.MessagingService"

# Streams get this long to finish at shutdown; then they are cancelled.
STOP_GRACE_SECONDS = 1.0


class GrpcPortUnavailable(RuntimeError):
    pass


def listen_address(host: str, port: int) -> str:
    bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"{bracketed}:{port}"


def handlers(service: MessagingService, stubs: Stubs) -> grpc.GenericRpcHandler:
    """The service's RPCs, built from the protocol's descriptor like the generated code does.

    Unlike the generated registration, a request that does not parse is
    handed to the service as `Unreadable` (answered BAD_REQUEST with a
    sentence) instead of failing the call with a traceback in the log.
    """
    descriptor = stubs.service.DESCRIPTOR.services_by_name[SERVICE_NAME.rsplit(".", 1)[1]]
    built = {}
    for method in descriptor.methods:
        request_type = GetMessageClass(method.input_type)
        response_type = GetMessageClass(method.output_type)
        make = {
            (False, False): grpc.unary_unary_rpc_method_handler,
            (False, True): grpc.unary_stream_rpc_method_handler,
            (True, True): grpc.stream_stream_rpc_method_handler,
        }[(method.client_streaming, method.server_streaming)]
        built[method.name] = make(
            getattr(service, method.name),
            request_deserializer=functools.partial(_parse, request_type),
            response_serializer=response_type.SerializeToString,
        )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, built)


def _parse(kind: type[Message], data: bytes) -> Message | Unreadable:
    try:
        return kind.FromString(data)
    except DecodeError as error:
        return Unreadable(f"the request is not a valid {kind.DESCRIPTOR.name}: {error}")


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
    server.add_generic_rpc_handlers((handlers(service, stubs),))
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
