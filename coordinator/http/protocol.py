"""uvicorn's HTTP protocol, sending each response in one write.

uvicorn writes the status line and headers when the app starts a response
and the body when it sends it: two `send()` system calls, and often two
wake-ups of the client, for every response. On the hot routes that was a
sixth of the server's time. Here the writes made within one turn of the
event loop are joined and sent at the end of that turn; the start and the
body of a response are sent in the same turn, so they leave together.

It also bounds the open connections of a server (max_connections): one more
is answered 429 and closed without reaching the app. And it bounds how long
a request may take to arrive (request_read_timeout): uvicorn times out idle
keep-alive connections only, so a client trickling its headers or body a
byte at a time held a connection, and its slot under max_connections, for
ever. A request not received whole in time is answered 408 and closed.

uvicorn builds the protocol with keyword arguments only, so the limits come
in as more of them: `functools.partial(CoalescingHttpToolsProtocol,
max_connections=N, request_read_timeout=S)` is the `http` protocol class.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from coordinator.http.request_record import TIMED_OUT, TOO_MANY_CONNECTIONS, record
from coordinator.metrics import RequestMeter

# Joined writes are sent at once from this size on: a long response written
# within one turn is not held in memory, and the real transport's flow
# control (pause_writing) still sees it grow.
FLUSH_BYTES = 64 * 1024

# How long a refused connection is read (and its bytes dropped) before it is
# closed anyway: closing a socket with unread request bytes makes the kernel
# reset the connection, which can destroy the 429 before the client reads it.
LINGER_SECONDS = 2.0


def _closing_answer(status: str, code: str, message: str, *headers: str) -> bytes:
    """A whole JSON error response, written by the protocol itself, that ends the connection."""
    body = json.dumps({"error": code, "message": message}, separators=(",", ":")).encode()
    head = "".join(
        [
            f"HTTP/1.1 {status}\r\n",
            "content-type: application/json\r\n",
            f"content-length: {len(body)}\r\n",
            *(f"{header}\r\n" for header in headers),
            "connection: close\r\n\r\n",
        ]
    )
    return head.encode() + body


def _too_many_connections(limit: int) -> bytes:
    return _closing_answer(
        "429 Too Many Requests",
        "too_many_connections",
        f"this server holds {limit} open connections, its most; retry later or reuse a connection",
        "retry-after: 1",
    )


def _request_timeout(seconds: float) -> bytes:
    return _closing_answer(
        "408 Request Timeout",
        "request_timeout",
        f"the request was not received whole within {seconds:g} s",
    )


class _CoalescingTransport:
    """A transport that sends what is written in one loop turn as one write."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._pending_bytes = 0

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        self._pending_bytes = 0
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        # Everything else (flow control, extra info, is_closing, abort) is
        # the real transport's.
        return getattr(self._transport, name)


class _Refused(asyncio.Protocol):
    """A connection over the limit, answered already: drop what it sends until it ends."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._closing = loop.call_later(LINGER_SECONDS, transport.close)

    def data_received(self, data: bytes) -> None:
        pass

    def eof_received(self) -> bool:
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing.cancel()


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    def __init__(
        self,
        *args: Any,
        max_connections: int | None = None,
        request_read_timeout: float | None = None,
        requests: RequestMeter | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.max_connections = max_connections
        self.request_read_timeout = request_read_timeout
        self.requests = requests  # counts what this protocol answers itself
        self._read_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # an asyncio server gives a stream protocol a Transport
        # uvicorn keeps the server's open connections in server_state.connections
        # (added here by connection_made, removed by connection_lost), so their
        # count is exact per server without a counter of our own.
        limit = self.max_connections
        if limit is not None and len(self.connections) >= limit:
            self._refuse(transport, limit)
            return
        super().connection_made(_CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]  # it forwards what uvicorn calls
        # The first request is timed from the connection, so a connection that
        # sends nothing is closed too (keep-alive timing starts after a response).
        self._start_read_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_read_timer()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._stop_read_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_read_timer()
        super().connection_lost(exc)

    def _start_read_timer(self) -> None:
        if self.request_read_timeout is not None and self._read_timer is None:
            self._read_timer = self.loop.call_later(
                self.request_read_timeout, self._request_read_timed_out
            )

    def _stop_read_timer(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _request_read_timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not cycle.response_started:
            # No answer is on its way for this request: say why it ends. The
            # app, if it is waiting for the rest of the body, is told the
            # client left (http.disconnect) when the connection closes.
            assert self.request_read_timeout is not None
            self.transport.write(_request_timeout(self.request_read_timeout))
            # Answered here, never by the app: no method, no route.
            record(self.requests, None, TIMED_OUT, 408, None)
        self.transport.close()

    def _refuse(self, transport: asyncio.Transport, limit: int) -> None:
        # This protocol never joins the server's connections; from here on the
        # transport reports to _Refused, so neither counts it nor parses it.
        transport.set_protocol(_Refused(transport, self.loop))
        transport.write(_too_many_connections(limit))
        if transport.can_write_eof():
            try:
                transport.write_eof()  # the client reads the answer to its end at once
            except OSError:  # the client is gone already: nobody to tell
                transport.close()
        record(self.requests, None, TOO_MANY_CONNECTIONS, 429, None)
