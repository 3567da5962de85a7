"""The gRPC server of the RocketMQ door, run beside HTTP in one process on one core."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from time import perf_counter
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

from coordinator.core import Coordinator
from coordinator.core.auth import Authenticator
from coordinator.core.configs import GrpcDoorConfig
from coordinator.domain.errors import DoorFailed
from coordinator.grpc.service import MessagingService
from coordinator.grpc.status import Unreadable
from coordinator.grpc.stubs import Stubs, load
from coordinator.logs import ACCESS, access_line
from coordinator.metrics import RequestMeter

log = logging.getLogger(__name__)

SERVICE_NAME = "apache.rocketmq.v2.MessagingService"

# RPCs in flight get this long to finish at shutdown; then they are
# cancelled. Long polls and Telemetry streams end at once (the core is
# stopping), so this bounds only ordinary calls that are slow.
STOP_GRACE_SECONDS = 10.0


def listen_address(host: str, port: int) -> str:
    bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"{bracketed}:{port}"


def handlers(
    service: MessagingService, stubs: Stubs, requests: RequestMeter
) -> grpc.GenericRpcHandler:
    """The service's RPCs, built from the protocol's descriptor like the generated code does.

    Unlike the generated registration, a request that does not parse is
    handed to the service as `Unreadable` (answered BAD_REQUEST with a
    sentence) instead of failing the call with a traceback in the log.
    """
    descriptor = stubs.service.DESCRIPTOR.services_by_name[SERVICE_NAME.rsplit(".", 1)[1]]
    meter = _Meter(stubs, requests)
    built = {}
    for method in descriptor.methods:
        request_type = GetMessageClass(method.input_type)
        response_type = GetMessageClass(method.output_type)
        # the handler factory (grpc ships no type information) and the metered method
        handlers: dict[tuple[bool, bool], tuple[Callable[..., Any], Callable[..., Any]]] = {
            (False, False): (grpc.unary_unary_rpc_method_handler, meter.unary),
            (False, True): (grpc.unary_stream_rpc_method_handler, meter.unary_stream),
            (True, True): (grpc.stream_stream_rpc_method_handler, meter.stream),
        }
        make, metered = handlers[(method.client_streaming, method.server_streaming)]
        built[method.name] = make(
            metered(method.name, getattr(service, method.name)),
            request_deserializer=functools.partial(_parse, request_type),
            response_serializer=response_type.SerializeToString,
        )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, built)


# The code label of a call that ended without an answer (the client left, or
# the server stopped), and of one whose handler raised.
CANCELLED = "CANCELLED"
FAILED = "ERROR"


class _Meter:
    """Counts and times each call by RPC and the RocketMQ code of its answer, and logs it.

    Every answer carries its status in the response (gRPC's own status is OK),
    so the code is read from there: the first response's, for a stream.
    """

    def __init__(self, stubs: Stubs, requests: RequestMeter) -> None:
        codes = stubs.definition.Code.DESCRIPTOR.values
        self._names = {value.number: value.name for value in codes}
        self._requests = requests

    def _code(self, response: Any) -> str:
        code = response.status.code
        return self._names.get(code) or str(code)

    def unary(self, rpc: str, handler: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def metered(request: Any, context: Any) -> Any:
            started = perf_counter()
            code = FAILED
            try:
                response = await handler(request, context)
                code = self._code(response)
                return response
            except asyncio.CancelledError:
                code = CANCELLED
                raise
            finally:
                answered(self._requests, rpc, code, started, timed=True)

        return metered

    def unary_stream(
        self, rpc: str, handler: Callable[..., AsyncIterator[Any]]
    ) -> Callable[..., AsyncIterator[Any]]:
        async def metered(request: Any, context: Any) -> AsyncIterator[Any]:
            started = perf_counter()
            code: str | None = None
            try:
                async for response in handler(request, context):
                    if code is None and response.HasField("status"):
                        code = self._code(response)
                    yield response
            except (asyncio.CancelledError, GeneratorExit):
                code = code or CANCELLED
                raise
            except Exception:
                code = FAILED
                raise
            finally:
                answered(self._requests, rpc, code or CANCELLED, started, timed=True)

        return metered

    def stream(self, rpc: str, handler: Callable[..., Awaitable[None]]) -> Callable[..., Any]:
        # Telemetry: open for as long as the client runs, so counted, not timed.
        async def metered(request_iterator: Any, context: Any) -> None:
            started = perf_counter()
            code = FAILED
            try:
                await handler(request_iterator, context)
                code = "OK"
            except asyncio.CancelledError:
                code = CANCELLED
                raise
            finally:
                answered(self._requests, rpc, code, started, timed=False)

        return metered


def answered(requests: RequestMeter, rpc: str, code: str, started: float, *, timed: bool) -> None:
    """Count (and time) one call with the core's meter of gRPC calls, and write its access
    line."""
    seconds = perf_counter() - started
    requests.observe((rpc, code), 1, seconds if timed else None)
    if ACCESS.isEnabledFor(logging.INFO):
        milliseconds = round(seconds * 1000, 3)
        access_line(
            "gRPC %s %s %.1f ms",
            (rpc, code, milliseconds),
            {"rpc": rpc, "code": code, "duration_ms": milliseconds},
        )


def _parse(kind: type[Message], data: bytes) -> Message | Unreadable:
    try:
        return kind.FromString(data)
    except DecodeError as error:
        return Unreadable(f"the request is not a valid {kind.DESCRIPTOR.name}: {error}")


def server_options(config: GrpcDoorConfig) -> list[tuple[str, int]]:
    """gRPC core's channel arguments: the door's limits, enforced before any RPC runs.

    Connections are gRPC core's, out of Python's sight, so core bounds them:
    at most max_connections open (one more is closed as soon as it is
    accepted, as HTTP's door answers 429 past the same number), a connection
    that has not sent its HTTP/2 preface and settings within the handshake
    timeout is closed, and so is one without a call in progress for the idle
    timeout (a Telemetry stream or a waiting receive is a call: the official
    clients keep one open, so their connections are never idle).
    """
    return [
        ("grpc.max_receive_message_length", config.max_request_bytes),
        ("grpc.max_send_message_length", config.max_request_bytes),
        ("grpc.max_allowed_incoming_connections", config.max_connections),
        (
            "grpc.server_handshake_timeout_ms",
            _milliseconds(config.grpc_handshake_timeout_seconds),
        ),
        ("grpc.max_connection_idle_ms", _milliseconds(config.grpc_idle_timeout_seconds)),
    ]


def _milliseconds(seconds: float) -> int:
    # gRPC core takes a C int: longer than about 24 days is as good as never.
    return max(1, min(int(seconds * 1000), 2**31 - 1))


@asynccontextmanager
async def running_grpc_door(
    core: Coordinator, authenticator: Authenticator
) -> AsyncIterator[GrpcDoor]:
    """Serve `apache.rocketmq.v2.MessagingService` on host:grpc_port (the core's config)."""
    config = core.configs.grpc
    assert config.grpc_port is not None
    stubs = load()
    server = grpc.aio.server(options=server_options(config))
    service = MessagingService(core, authenticator, config, stubs, port=config.grpc_port)
    server.add_generic_rpc_handlers((handlers(service, stubs, core.meter.grpc),))
    address = listen_address(config.host, config.grpc_port)
    try:
        if config.tls_cert_file and config.tls_key_file:
            credentials = grpc.ssl_server_credentials(
                [(config.tls_key_file.read_bytes(), config.tls_cert_file.read_bytes())]
            )
            server.add_secure_port(address, credentials)
        else:
            server.add_insecure_port(address)
    except RuntimeError as error:
        raise DoorFailed(f"cannot listen for gRPC on {address}: {error}") from None
    await server.start()
    door = GrpcDoor(server, service)
    try:
        yield door
    finally:
        # Ends the Telemetry streams now, as the core's stopping ended the
        # waiting receives; server.stop refuses new calls and returns once
        # those in flight are answered (or door.hurry cut the wait).
        service.begin_close()
        await server.stop(STOP_GRACE_SECONDS)
        await service.close()
        door.ended.cancel()


class GrpcDoor:
    """A serving gRPC door, as the node sees it."""

    def __init__(self, server: grpc.aio.Server, service: MessagingService) -> None:
        self.service = service
        self._server = server
        self._hurried: asyncio.Future[None] | None = None
        # Ends on its own only if the server terminates without being asked.
        self.ended = asyncio.ensure_future(server.wait_for_termination())

    def hurry(self) -> None:
        """Cancel the calls in flight instead of waiting for them (a second Ctrl-C)."""
        self._hurried = asyncio.ensure_future(self._server.stop(None))
