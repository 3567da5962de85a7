"""The served HTTP protocol sends the writes of one event-loop turn as one write."""

from __future__ import annotations

import asyncio

from coordinator.http.protocol import FLUSH_BYTES, _CoalescingTransport


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
