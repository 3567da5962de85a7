"""A check URL's answer is read within max_check_answer_bytes, as sent and as decoded.

The answers here are streamed through httpx's MockTransport, chunk by chunk
from generators, so a test sees how much of an answer was read before the
push gave up; a served coordinator against real bombs is
tests/acceptance/test_security_check_urls.py.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from coordinator.config import Settings
from coordinator.core.checkback import push
from coordinator.core.configs import ServiceConfigs
from coordinator.domain.states import Resolution
from tests.checkback_helpers import pushed_check_request

LIMIT = 1024
CHUNK = 16 * 1024


class Answer:
    """A streamed answer that counts the bytes the push took of it."""

    def __init__(self, chunks: Iterator[bytes], headers: dict[str, str] | None = None) -> None:
        self._chunks = chunks
        self.headers = headers or {}
        self.taken = 0

    async def _stream(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            self.taken += len(chunk)
            yield chunk

    def response(self, _: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=self.headers, content=self._stream())


async def _push(answer: Answer, limit: int = LIMIT) -> push.PushOutcome:
    transport = httpx.MockTransport(answer.response)
    async with httpx.AsyncClient(transport=transport) as client:
        return await push.push(
            client, "http://127.0.0.1:9/check", pushed_check_request(), None, max_answer_bytes=limit
        )


def _zeros(total: int) -> Iterator[bytes]:
    for _ in range(total // CHUNK):
        yield bytes(CHUNK)


def _compressed(chunks: Iterator[bytes], wbits: int) -> Iterator[bytes]:
    """Compress as the chunks come: a bomb is never whole in memory."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    for chunk in chunks:
        if out := compressor.compress(chunk):
            yield out
    yield compressor.flush()


def _gzip(chunks: Iterator[bytes]) -> Iterator[bytes]:
    return _compressed(chunks, 16 + zlib.MAX_WBITS)


def _failed(outcome: push.PushOutcome, says: str) -> None:
    assert not outcome.delivered and outcome.resolution is None
    assert outcome.detail is not None and says in outcome.detail, outcome.detail
    assert "max_check_answer_bytes" in outcome.detail or "not valid" in outcome.detail


@pytest.mark.anyio
async def test_an_answer_declaring_too_many_bytes_is_not_read() -> None:
    answer = Answer(_zeros(64 * CHUNK), {"content-length": str(64 * CHUNK)})
    outcome = await _push(answer)
    _failed(outcome, f"declares {64 * CHUNK} bytes, more than {LIMIT} bytes")
    assert answer.taken == 0


@pytest.mark.anyio
async def test_a_streamed_answer_is_given_up_once_past_the_bound() -> None:
    answer = Answer(_zeros(1024 * CHUNK))  # 16 MiB, chunked: no length declared
    outcome = await _push(answer)
    _failed(outcome, f"has more than {LIMIT} bytes")
    assert answer.taken <= LIMIT + CHUNK


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("coding", "wbits"),
    [("gzip", 16 + zlib.MAX_WBITS), ("deflate", zlib.MAX_WBITS), ("deflate", -zlib.MAX_WBITS)],
)
async def test_a_compression_bomb_is_given_up_once_its_inflated_bytes_pass_the_bound(
    coding: str, wbits: int
) -> None:
    # 64 MiB of zeros: about 64 KiB compressed, within an encoded bound of 1 MiB
    answer = Answer(_compressed(_zeros(64 * 1024 * 1024), wbits), {"content-encoding": coding})
    outcome = await _push(answer, limit=1024 * 1024)
    _failed(outcome, f"inflates ({coding}) to more than {1024 * 1024} bytes")
    assert answer.taken < 64 * 1024


@pytest.mark.anyio
@pytest.mark.parametrize("coding", ["gzip", "x-gzip", "deflate", "identity", "br"])
async def test_a_small_answer_is_read_in_any_coding(coding: str) -> None:
    body = b'{"resolution": "rollback", "pad": "' + b"x" * 800 + b'"}'
    chunks = {
        "gzip": _gzip(iter([body])),
        "x-gzip": _gzip(iter([body])),
        "deflate": _compressed(iter([body]), zlib.MAX_WBITS),
    }.get(coding, iter([body]))  # other codings are read as they are, as httpx does
    outcome = await _push(Answer(chunks, {"content-encoding": coding}))
    assert outcome.delivered and outcome.resolution is Resolution.ROLLBACK


@pytest.mark.anyio
async def test_an_answer_of_exactly_the_bound_is_read() -> None:
    body = b'{"resolution": "commit"}'
    padded = body + b" " * (LIMIT - len(body))
    outcome = await _push(Answer(_gzip(iter([padded])), {"content-encoding": "gzip"}))
    assert outcome.delivered and outcome.resolution is Resolution.COMMIT
    outcome = await _push(Answer(_gzip(iter([padded + b" "])), {"content-encoding": "gzip"}))
    _failed(outcome, "inflates (gzip) to more than")


@pytest.mark.anyio
async def test_an_answer_that_is_not_the_gzip_it_says_is_a_failed_push() -> None:
    outcome = await _push(Answer(iter([b"not gzip at all"]), {"content-encoding": "gzip"}))
    _failed(outcome, "the check URL's answer is not valid gzip")


@pytest.mark.anyio
async def test_an_answer_encoded_twice_is_a_failed_push() -> None:
    body = b'{"resolution": "commit"}'
    twice = _gzip(_gzip(iter([body])))
    outcome = await _push(Answer(twice, {"content-encoding": "gzip, gzip"}))
    assert not outcome.delivered and outcome.detail is not None
    assert "encoded 2 times (gzip, gzip)" in outcome.detail


@pytest.mark.anyio
async def test_a_push_asks_for_the_codings_it_inflates_only() -> None:
    asked: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.headers.get("accept-encoding"))
        return httpx.Response(200)

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        await push.push(client, "http://127.0.0.1:9/check", pushed_check_request(), None)
    assert asked == ["gzip, deflate"]


def test_the_bound_is_a_setting_of_64_kib() -> None:
    assert Settings(_env_file=None).max_check_answer_bytes == 64 * 1024
    settings = Settings(_env_file=None, max_check_answer_bytes=2048)
    assert ServiceConfigs.from_settings(settings).checkback.max_check_answer_bytes == 2048


@pytest.mark.anyio
async def test_an_answer_trickling_in_is_given_up_at_the_push_timeout() -> None:
    async def trickle() -> AsyncIterator[bytes]:
        for _ in range(600):  # a byte every 0.1 s: each read well within httpx's timeout
            await asyncio.sleep(0.1)
            yield b" "

    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=trickle())

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer), timeout=5) as client:
        outcome = await push.push(
            client, "http://127.0.0.1:9/check", pushed_check_request(), None, timeout_seconds=0.5
        )
    assert not outcome.delivered and outcome.detail == (
        "no whole answer from the check URL within 0.5 s (check_push_timeout_seconds)"
    )
