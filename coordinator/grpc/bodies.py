"""A sent message's body, unpacked from GZIP within bounds and without stalling the event loop.

A GZIP body is tiny on the wire and may unpack into gigabytes, so the
inflated size is bounded twice: per message by `max_body_bytes` (as HTTP
bounds a body) and per request by `max_request_bytes` (as HTTP bounds a
request), counting every byte inflated, a refused body's too. Inflation is
incremental (`zlib.decompressobj` with `max_length`) and stops one byte past
the bound, so no more than that is ever held or computed. A body that
unpacks into more than one slice is finished in a worker thread (zlib lets
go of the GIL while it inflates): the loop serves other requests meanwhile;
a request of many small bodies lets the loop go after each slice's worth.
"""

from __future__ import annotations

import asyncio
import zlib

from coordinator.domain.errors import InvalidMessage
from coordinator.grpc.status import DoorError

# What is inflated on the event loop before the rest moves to a thread: an
# ordinary body is done in this one slice, with no thread hop.
LOOP_SLICE_BYTES = 64 * 1024

# zlib's window bits for either a GZIP or a zlib header and trailer: RocketMQ's
# "GZIP" bodies have been both (its remoting protocol compressed with zlib),
# and the official Python client unpacks both.
_GZIP = 32 + zlib.MAX_WBITS


class RequestBudget:
    """The bytes one request may still inflate (max_request_bytes, shared by its messages)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.left = limit
        self._on_loop = 0  # unpacked on the event loop since the request last let it go

    def take(self, used: int) -> None:
        self.left = max(0, self.left - used)

    def unpacked_on_loop(self, produced: int) -> bool:
        """Count bytes unpacked on the loop; True when it is time to let the loop go."""
        self._on_loop += produced
        if self._on_loop < LOOP_SLICE_BYTES:
            return False
        self._on_loop = 0
        return True


async def gunzip(data: bytes, max_body_bytes: int, budget: RequestBudget) -> bytes:
    """The body GZIP `data` unpacks into; DoorError MESSAGE_BODY_TOO_LARGE past a bound,
    InvalidMessage when it is not GZIP."""
    # The request's budget, when it is the tighter bound, names the refusal.
    per_request = budget.left < max_body_bytes
    limit = budget.left if per_request else max_body_bytes
    inflater = _Inflater(data, limit + 1)
    try:
        done = inflater.run(LOOP_SLICE_BYTES)
        if not done:
            await asyncio.to_thread(inflater.run, None)
        elif budget.unpacked_on_loop(inflater.produced):
            # Many bodies of a slice each: other requests are served between them.
            await asyncio.sleep(0)
    finally:
        budget.take(inflater.produced)
    if inflater.produced > limit:
        if per_request:
            raise DoorError(
                "MESSAGE_BODY_TOO_LARGE",
                "the unpacked bodies of this request are larger than "
                f"max_request_bytes={budget.limit}: send fewer or smaller messages per request",
            )
        raise DoorError(
            "MESSAGE_BODY_TOO_LARGE",
            f"the unpacked body is larger than max_body_bytes={max_body_bytes}",
        )
    return inflater.body()


class _Inflater:
    """GZIP (or zlib) members one after the other (as `gzip` reads them), at most `most`
    bytes out."""

    def __init__(self, data: bytes, most: int) -> None:
        self._input = data
        self._most = most
        self._member = zlib.decompressobj(_GZIP)
        self._chunks: list[bytes] = []
        self.produced = 0

    def run(self, slice_bytes: int | None) -> bool:
        """Inflate about `slice_bytes` more (None: to the end); True once finished."""
        target = self._most if slice_bytes is None else min(self._most, self.produced + slice_bytes)
        try:
            while self.produced < target:
                if self._member.eof:
                    rest = self._member.unused_data
                    if not rest.strip(b"\0"):  # gzip too ignores trailing zero padding
                        return True
                    self._member = zlib.decompressobj(_GZIP)
                    self._input = rest
                out = self._member.decompress(self._input, target - self.produced)
                self._input = self._member.unconsumed_tail
                self._chunks.append(out)
                self.produced += len(out)
                if not out and not self._input and not self._member.eof:
                    raise InvalidMessage(
                        "the GZIP body does not unpack: it ends before its end-of-stream marker"
                    )
        except zlib.error as error:
            raise InvalidMessage(f"the GZIP body does not unpack: {error}") from None
        # Stopped at the bound (too large: no need to go on) or at the slice's end.
        return self.produced >= self._most

    def body(self) -> bytes:
        return b"".join(self._chunks)
