"""The served HTTP protocol sends the writes of one event-loop turn as one write,
and answers a connection over its limit with 429."""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import json

import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.server import ServerState

from coordinator.http.protocol import (
    FLUSH_BYTES,
    CoalescingHttpToolsProtocol,
    _CoalescingTransport,
)

# The private uvicorn class protocol.py subclasses; pyproject.toml bounds
# uvicorn's version because of it.
UVICORN_MODULE = "uvicorn.protocols.http.httptools_impl"
UVICORN_CLASS = "HttpToolsProtocol"
RAISED_BOUND = (
    "coordinator/http/protocol.py subclasses uvicorn's private "
    f"{UVICORN_MODULE}.{UVICORN_CLASS} (uvicorn {uvicorn.__version__} installed): "
)


class RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: object = None) -> object:
        return ("127.0.0.1", 8080) if name == "sockname" else default


async def _turn() -> None:
    await asyncio.sleep(0)


def test_a_response_start_and_body_leave_in_one_write() -> None:
    async def scenario() -> list[bytes]:
        real = RecordingTransport()
        transport = _CoalescingTransport(real, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        transport.write(b"{}")
        assert real.writes == []  # nothing sent within the turn
        await _turn()
        transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")  # the next response
        await _turn()
        return real.writes

    assert asyncio.run(scenario()) == [
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}",
        b"HTTP/1.1 204 No Content\r\n\r\n",
    ]


def test_close_sends_what_is_pending_first_and_the_rest_is_the_real_transport() -> None:
    async def scenario() -> RecordingTransport:
        real = RecordingTransport()
        transport = _CoalescingTransport(real, asyncio.get_running_loop())
        assert transport.get_extra_info("sockname") == ("127.0.0.1", 8080)
        transport.write(b"last words")
        transport.close()
        assert transport.is_closing()
        transport.write(b"after close")  # dropped, as by a closed transport
        await _turn()
        return real

    real = asyncio.run(scenario())
    assert real.writes == [b"last words"] and real.closed


def test_a_long_response_is_sent_as_it_grows_not_held_until_the_turn_ends() -> None:
    async def scenario() -> list[bytes]:
        real = RecordingTransport()
        transport = _CoalescingTransport(real, asyncio.get_running_loop())
        chunk = b"x" * (FLUSH_BYTES // 2)
        for _ in range(4):
            transport.write(chunk)
        sent_within_the_turn = list(real.writes)
        transport.write(b"tail")
        await _turn()
        assert real.writes[len(sent_within_the_turn) :] == [b"tail"]
        return sent_within_the_turn

    assert asyncio.run(scenario()) == [b"x" * FLUSH_BYTES, b"x" * FLUSH_BYTES]


def test_uvicorn_still_has_the_class_and_hook_the_protocol_overrides() -> None:
    module = importlib.import_module(UVICORN_MODULE)
    base = getattr(module, UVICORN_CLASS, None)
    assert base is not None, RAISED_BOUND + "the class is gone"
    assert issubclass(CoalescingHttpToolsProtocol, base)
    hook = getattr(base, "connection_made", None)
    assert hook is not None, RAISED_BOUND + "it no longer has connection_made"
    assert list(inspect.signature(hook).parameters) == ["self", "transport"], (
        RAISED_BOUND + f"connection_made is now {inspect.signature(hook)}"
    )


async def _two_byte_answer(scope: Scope, receive: Receive, send: Send) -> None:
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"{}"})


def test_a_response_served_by_uvicorn_through_the_protocol_leaves_in_one_write() -> None:
    # The subclass swaps the transport uvicorn is given in connection_made;
    # that saves a write only while uvicorn writes every response through it.
    async def scenario() -> list[bytes]:
        config = uvicorn.Config(
            _two_byte_answer, http=CoalescingHttpToolsProtocol, lifespan="off", access_log=False
        )
        protocol = CoalescingHttpToolsProtocol(  # as uvicorn's server builds it
            config=config, server_state=ServerState(), app_state={}
        )
        real = RecordingTransport()
        protocol.connection_made(real)
        assert isinstance(protocol.transport, _CoalescingTransport), (
            RAISED_BOUND + "self.transport is no longer the transport connection_made was given"
        )
        protocol.data_received(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
        for _ in range(5):
            await _turn()
        protocol.connection_lost(None)
        return real.writes

    writes = asyncio.run(scenario())
    assert len(writes) == 1, (
        RAISED_BOUND + f"a response reached the socket in {len(writes)} writes, not one: "
        "uvicorn writes some of it past the transport given to connection_made"
    )
    assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n") and writes[0].endswith(b"\r\n\r\n{}")


class EndableTransport(RecordingTransport):
    """A socket's transport: it can send its end (EOF) and be handed to another protocol."""

    def __init__(self) -> None:
        super().__init__()
        self.eof_written = False
        self.protocol: asyncio.BaseProtocol | None = None

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof_written = True

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.protocol = protocol


def test_a_connection_over_the_limit_is_answered_429_and_closed_and_a_freed_slot_serves() -> None:
    async def scenario() -> None:
        config = uvicorn.Config(
            _two_byte_answer, http=CoalescingHttpToolsProtocol, lifespan="off", access_log=False
        )
        state = ServerState()
        limited = functools.partial(CoalescingHttpToolsProtocol, max_connections=2)

        def connect() -> tuple[CoalescingHttpToolsProtocol, EndableTransport]:
            protocol = limited(config=config, server_state=state, app_state={})
            transport = EndableTransport()
            protocol.connection_made(transport)
            return protocol, transport

        first, _ = connect()
        second, _ = connect()
        assert len(state.connections) == 2

        refused, over = connect()
        await _turn()
        assert len(state.connections) == 2  # the refused one never counts
        (answer,) = over.writes
        head, body = answer.split(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 429 Too Many Requests\r\n")
        assert b"connection: close" in head and b"content-type: application/json" in head
        assert json.loads(body)["error"] == "too_many_connections"
        assert over.eof_written
        # The request that follows is read and dropped, never parsed or served.
        assert over.protocol is not None and over.protocol is not refused
        over.protocol.data_received(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
        assert over.protocol.eof_received() is False  # the client's end closes it
        over.protocol.connection_lost(None)
        assert over.writes == [answer] and not over.closed  # closed by the transport itself

        first.connection_lost(None)
        _, served = connect()
        assert len(state.connections) == 2
        assert served.protocol is None  # a connection of its own, parsed by uvicorn
        second.connection_lost(None)

    asyncio.run(scenario())


def test_without_a_limit_every_connection_is_served() -> None:
    async def scenario() -> None:
        config = uvicorn.Config(
            _two_byte_answer, http=CoalescingHttpToolsProtocol, lifespan="off", access_log=False
        )
        state = ServerState()
        for _ in range(3):
            CoalescingHttpToolsProtocol(
                config=config, server_state=state, app_state={}
            ).connection_made(EndableTransport())
        assert len(state.connections) == 3

    asyncio.run(scenario())
