"""Producers over HTTP: one message per call, and the batch API.

The load generator uses aiohttp: on a 2-core machine shared with the server
and Postgres, a cheaper client leaves more CPU to what is being measured.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp

GROUP = "bench-producers"
TOPIC = "bench"
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


async def _post(session: aiohttp.ClientSession, path: str, body: dict) -> dict:
    async with session.post(path, json=body) as response:
        if response.status >= 400:
            raise RuntimeError(f"{path}: {response.status} {await response.text()}")
        return await response.json()


async def _single_producer(
    session: aiohttp.ClientSession, stop_at: float, result: LoadResult
) -> None:
    half_body = {"topic": TOPIC, "producer_group": GROUP, "body_text": BODY}
    end_body = {"producer_group": GROUP, "resolution": "commit"}
    while time.perf_counter() < stop_at:
        start = time.perf_counter()
        half = await _post(session, "/v1/transactions", half_body)
        await _post(session, f"/v1/transactions/{half['transaction_id']}/end", end_body)
        result.latencies_ms.append((time.perf_counter() - start) * 1000)
        result.messages += 1


async def _batch_producer(
    session: aiohttp.ClientSession, stop_at: float, batch_size: int, result: LoadResult
) -> None:
    batch = {
        "messages": [{"topic": TOPIC, "producer_group": GROUP, "body_text": BODY}] * batch_size
    }
    while time.perf_counter() < stop_at:
        start = time.perf_counter()
        halves = await _post(session, "/v1/transactions/batch", batch)
        requests = [
            {"transaction_id": r["transaction_id"], "producer_group": GROUP, "resolution": "commit"}
            for r in halves["results"]
        ]
        ended = await _post(session, "/v1/transactions/end-batch", {"requests": requests})
        if not all(r["ok"] for r in ended["results"]):
            raise RuntimeError("a commit in the batch was refused")
        result.latencies_ms.append((time.perf_counter() - start) * 1000)
        result.messages += batch_size


async def _run(url: str, concurrency: int, seconds: float, batch_size: int | None) -> LoadResult:
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(base_url=url, connector=connector) as session:
        await _single_producer(session, time.perf_counter() + 0.5, LoadResult())  # warm up
        result = LoadResult()
        start = time.perf_counter()
        stop_at = start + seconds
        if batch_size is None:
            workers = [_single_producer(session, stop_at, result) for _ in range(concurrency)]
        else:
            workers = [
                _batch_producer(session, stop_at, batch_size, result) for _ in range(concurrency)
            ]
        await asyncio.gather(*workers)
        result.seconds = time.perf_counter() - start
    return result


def run_single(url: str, *, concurrency: int, seconds: float) -> LoadResult:
    return asyncio.run(_run(url, concurrency, seconds, None))


def run_batches(url: str, *, concurrency: int, seconds: float, batch_size: int) -> LoadResult:
    return asyncio.run(_run(url, concurrency, seconds, batch_size))
