"""uvicorn's HTTP protocol, sending each response in one write.

uvicorn writes the status line and headers when the app starts a response
and the body when it sends it: two `send()` system calls, and often two
wake-ups of the client, for every response. On the hot routes that was a
sixth of the server's time. Here the writes made within one turn of the
event loop are joined and sent at the end of that turn; the start and the
body of a response are sent in the same turn, so they leave together.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Joined writes are sent at once from this size on: a long response written
# within one turn is not held in memory, and the real transport's flow
# control (pause_writing) still sees it grow.
FLUSH_BYTES = 64 * 1024


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


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
