"""Producers over HTTP: one message per call, and the batch API.

The load generator shares the 2-core machine with the server and Postgres,
so every microsecond it spends is taken from what is being measured. It is
therefore as lean as HTTP/1.1 allows: one keep-alive connection per producer,
requests written as prepared bytes, responses parsed by httptools (the C
parser uvicorn uses) on a uvloop event loop. An aiohttp client cost about
300 µs of CPU per request here, this one about a tenth of that.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import urlparse

import httptools
import uvloop

GROUP = "bench-producers"
TOPIC = "bench"
# Subscribed to TOPIC, so that every commit also makes its message deliverable
# (one delivery row), as the baseline's commit does. Nobody consumes.
CONSUMER_GROUP = "bench-consumers"
BODY = "order 1001 created"


@dataclass
class LoadResult:
    messages: int = 0
    seconds: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)

    @property
    def messages_per_second(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies_ms)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


class Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection, one request at a time."""

    def __init__(self, host: str) -> None:
        self._host = host.encode()
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._response: asyncio.Future[tuple[int, bytes]] | None = None
        self._body: list[bytes] = []
        self._lost: Exception | None = None

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        self._parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc or ConnectionError("the server closed the connection")
        if self._response is not None and not self._response.done():
            self._response.set_exception(self._lost)

    # httptools callbacks
    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        assert self._response is not None
        self._response.set_result((self._parser.get_status_code(), b"".join(self._body)))
        self._body = []

    async def post(self, path: str, body: bytes) -> dict:
        return await self.request("POST", path, body)

    async def request(self, method: str, path: str, body: bytes) -> dict:
        if self._lost is not None:
            raise self._lost
        assert self._transport is not None
        self._response = asyncio.get_running_loop().create_future()
        self._transport.write(
            b"%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s"
            % (method.encode(), path.encode(), self._host, len(body), body)
        )
        status, answer = await self._response
        if status >= 400:
            raise RuntimeError(f"{path}: {status} {answer.decode(errors='replace')}")
        return json.loads(answer)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def connect(url: str) -> Connection:
    parsed = urlparse(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    _, connection = await asyncio.get_running_loop().create_connection(
        lambda: Connection(f"{host}:{port}"), host, port
    )
    return connection


async def _single_producer(connection: Connection, stop_at: float, result: LoadResult) -> None:
    half_body = json.dumps({"topic": TOPIC, "producer_group": GROUP, "body_text": BODY}).encode()
    end_body = json.dumps({"producer_group": GROUP, "resolution": "commit"}).encode()
    while time.perf_counter() < stop_at:
        start = time.perf_counter()
        half = await connection.post("/v1/transactions", half_body)
        await connection.post(f"/v1/transactions/{half['transaction_id']}/end", end_body)
        result.latencies_ms.append((time.perf_counter() - start) * 1000)
        result.messages += 1


async def _batch_producer(
    connection: Connection, stop_at: float, batch_size: int, result: LoadResult
) -> None:
    batch = json.dumps(
        {"messages": [{"topic": TOPIC, "producer_group": GROUP, "body_text": BODY}] * batch_size}
    ).encode()
    while time.perf_counter() < stop_at:
        start = time.perf_counter()
        halves = await connection.post("/v1/transactions/batch", batch)
        requests = [
            {"transaction_id": r["transaction_id"], "producer_group": GROUP, "resolution": "commit"}
            for r in halves["results"]
        ]
        ended = await connection.post(
            "/v1/transactions/end-batch", json.dumps({"requests": requests}).encode()
        )
        if not all(r["ok"] for r in ended["results"]):
            raise RuntimeError("a commit in the batch was refused")
        result.latencies_ms.append((time.perf_counter() - start) * 1000)
        result.messages += batch_size


async def _run(url: str, concurrency: int, seconds: float, batch_size: int | None) -> LoadResult:
    connections = [await connect(url) for _ in range(concurrency)]
    try:
        await connections[0].request(
            "PUT",
            f"/v1/consumer-groups/{CONSUMER_GROUP}/subscriptions/{TOPIC}",
            b'{"expression": "*"}',
        )
        await _single_producer(connections[0], time.perf_counter() + 0.5, LoadResult())  # warm up
        result = LoadResult()
        start = time.perf_counter()
        stop_at = start + seconds
        if batch_size is None:
            workers = [_single_producer(c, stop_at, result) for c in connections]
        else:
            workers = [_batch_producer(c, stop_at, batch_size, result) for c in connections]
        await asyncio.gather(*workers)
        result.seconds = time.perf_counter() - start
    finally:
        for connection in connections:
            connection.close()
    return result


def run_single(url: str, *, concurrency: int, seconds: float) -> LoadResult:
    return uvloop.run(_run(url, concurrency, seconds, None))


def run_batches(url: str, *, concurrency: int, seconds: float, batch_size: int) -> LoadResult:
    return uvloop.run(_run(url, concurrency, seconds, batch_size))
