"""Commit-to-consumer latency: a consumer long-polls while a producer commits.

Each sample: a half message is stored, then the clock starts just before the
commit request is sent and stops when the waiting consumer's receive returns
that message. So a sample holds the commit round trip, the delivery fan-out
in the commit's transaction, NOTIFY waking the long poll and the claim.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from bench.http_load import LoadResult, _post

GROUP = "bench-latency-producers"
TOPIC = "bench-latency"
CONSUMER_GROUP = "bench-latency-consumers"


async def _run(url: str, samples: int) -> LoadResult:
    result = LoadResult()
    async with aiohttp.ClientSession(base_url=url) as session:
        async with session.put(
            f"/v1/consumer-groups/{CONSUMER_GROUP}/subscriptions/{TOPIC}", json={"expression": "*"}
        ) as response:
            response.raise_for_status()
        arrived: dict[str, float] = {}

        async def consume(stop: asyncio.Event) -> None:
            while not stop.is_set():
                answer = await _post(
                    session,
                    f"/v1/consumer-groups/{CONSUMER_GROUP}/receive",
                    {"max_messages": 16, "wait_seconds": 2, "invisible_seconds": 60},
                )
                now = time.perf_counter()
                for message in answer["messages"]:
                    arrived[message["message_id"]] = now
                    await _post(
                        session,
                        f"/v1/consumer-groups/{CONSUMER_GROUP}/ack",
                        {"receipt_handle": message["receipt_handle"]},
                    )

        stop = asyncio.Event()
        consumer = asyncio.create_task(consume(stop))
        await asyncio.sleep(0.3)  # the consumer is waiting
        start = time.perf_counter()
        for _ in range(samples):
            half = await _post(
                session,
                "/v1/transactions",
                {"topic": TOPIC, "producer_group": GROUP, "body_text": "latency probe"},
            )
            committed_at = time.perf_counter()
            await _post(
                session,
                f"/v1/transactions/{half['transaction_id']}/end",
                {"producer_group": GROUP, "resolution": "commit"},
            )
            deadline = time.perf_counter() + 10
            while half["message_id"] not in arrived:
                if time.perf_counter() > deadline:
                    raise RuntimeError("a committed message never reached the consumer")
                await asyncio.sleep(0.0005)
            result.latencies_ms.append((arrived[half["message_id"]] - committed_at) * 1000)
            result.messages += 1
        result.seconds = time.perf_counter() - start
        stop.set()
        await consumer
    return result


def run_consumer_latency(url: str, *, samples: int) -> LoadResult:
    return asyncio.run(_run(url, samples))
