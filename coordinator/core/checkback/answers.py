"""A check URL's answer, read within a bound: what it says, and never more than that.

An answer is a tiny JSON object, but the check URL is the producer's and may
answer anything: a body of gigabytes, or a few hundred kilobytes of gzip
that inflate to gigabytes. The answer is read as it arrives and given up as
soon as its bytes on the wire (the declared Content-Length, then the count
read) or its decoded bytes pass `max_check_answer_bytes`. gzip and deflate
(what httpx asks for) are inflated here, at most the bytes still allowed at
a time, rather than by httpx, which inflates each chunk whole: one 64 KiB
chunk of a gzip bomb is 64 MiB. A push asks for these two codings only.
"""

from __future__ import annotations

import zlib

import httpx

# Content codings inflated here; any other is read as it is, as httpx does.
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
# What a push asks for: httpx's default would add br and zstd wherever their
# packages happen to be installed, and an answer in those is read as it is.
ACCEPT_ENCODING = "gzip, deflate"


class UnreadableAnswer(Exception):
    """The answer is too large, or not the encoding it says; the sentence says which."""


class _Inflater:
    """gzip or deflate, inflated at most `room` bytes per call."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self._zlib = zlib.decompressobj(_WBITS[coding])
        self._started = False

    def inflate(self, data: bytes, room: int) -> bytes:
        """Up to `room` (at least 1) bytes of output; more pending shows in `pending`."""
        try:
            out = self._zlib.decompress(data, room)
        except zlib.error:
            if self.coding != "deflate" or self._started:
                raise
            # Some servers send "deflate" without zlib's header, as httpx allows.
            self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
            out = self._zlib.decompress(data, room)
        self._started = True
        return out

    @property
    def pending(self) -> bool:
        return bool(self._zlib.unconsumed_tail)


def _inflater(response: httpx.Response) -> _Inflater | None:
    codings = [
        c.strip().lower()
        for c in response.headers.get_list("content-encoding", split_commas=True)
        if c.strip().lower() in _WBITS
    ]
    if len(codings) > 1:
        raise UnreadableAnswer(
            f"the check URL's answer is encoded {len(codings)} times "
            f"({', '.join(codings)}); the coordinator decodes one gzip or deflate"
        )
    return _Inflater(codings[0]) if codings else None


def _too_large(limit: int, what: str) -> UnreadableAnswer:
    return UnreadableAnswer(
        f"the check URL's answer {what} more than {limit} bytes "
        "(max_check_answer_bytes); not read further"
    )


async def read_answer(response: httpx.Response, limit: int) -> bytes:
    """The decoded body of a streamed response, at most `limit` bytes, else UnreadableAnswer."""
    if response.is_stream_consumed:
        # Made whole in memory (httpx's MockTransport), and decoded already.
        if len(response.content) > limit:
            raise _too_large(limit, "has")
        return response.content
    declared = response.headers.get("content-length", "").strip()
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit, f"declares {int(declared)} bytes,")
    inflater = _inflater(response)
    decoded = bytearray()
    received = 0
    try:
        async for chunk in response.aiter_raw():
            received += len(chunk)
            if received > limit:
                raise _too_large(limit, "has")
            if inflater is None:
                decoded += chunk
                continue
            # room >= 1 while within the limit: zlib reads max_length 0 as no bound
            decoded += inflater.inflate(chunk, limit + 1 - len(decoded))
            if len(decoded) > limit or inflater.pending:
                raise _too_large(limit, f"inflates ({inflater.coding}) to")
        # No flush: an inflate that stopped short of its room left nothing pending.
    except zlib.error as error:
        assert inflater is not None
        raise UnreadableAnswer(
            f"the check URL's answer is not valid {inflater.coding}: {error}"
        ) from None
    return bytes(decoded)
