"""Commit-to-consumer latency: a consumer long-polls while a producer commits.

Each sample: a half message is stored, then the clock starts just before the
commit request is sent and stops when the waiting consumer's receive returns
that message. So a sample holds the commit round trip, the delivery fan-out
in the commit's transaction, NOTIFY waking the long poll and the claim.
"""

from __future__ import annotations

import asyncio
import json
import time

import uvloop

from bench.http_load import LoadResult, connect

GROUP = "bench-latency-producers"
TOPIC = "bench-latency"
CONSUMER_GROUP = "bench-latency-consumers"


def _json(body: dict) -> bytes:
    return json.dumps(body).encode()


async def _run(url: str, samples: int) -> LoadResult:
    result = LoadResult()
    producer, consumer = await connect(url), await connect(url)  # one request at a time each
    try:
        await producer.request(
            "PUT",
            f"/v1/consumer-groups/{CONSUMER_GROUP}/subscriptions/{TOPIC}",
            _json({"expression": "*"}),
        )
        arrivals: dict[str, asyncio.Future[float]] = {}

        def arrival(message_id: str) -> asyncio.Future[float]:
            return arrivals.setdefault(message_id, asyncio.get_running_loop().create_future())

        async def consume(stop: asyncio.Event) -> None:
            path = f"/v1/consumer-groups/{CONSUMER_GROUP}/receive"
            receive = _json({"max_messages": 16, "wait_seconds": 2, "invisible_seconds": 60})
            while not stop.is_set():
                answer = await consumer.post(path, receive)
                now = time.perf_counter()
                for message in answer["messages"]:
                    arrival(message["message_id"]).set_result(now)
                    await consumer.post(
                        f"/v1/consumer-groups/{CONSUMER_GROUP}/ack",
                        _json({"receipt_handle": message["receipt_handle"]}),
                    )

        stop = asyncio.Event()
        consuming = asyncio.create_task(consume(stop))
        await asyncio.sleep(0.3)  # the consumer is waiting
        probe = _json({"topic": TOPIC, "producer_group": GROUP, "body_text": "latency probe"})
        commit = _json({"producer_group": GROUP, "resolution": "commit"})
        start = time.perf_counter()
        for _ in range(samples):
            half = await producer.post("/v1/transactions", probe)
            committed_at = time.perf_counter()
            await producer.post(f"/v1/transactions/{half['transaction_id']}/end", commit)
            try:
                arrived_at = await asyncio.wait_for(arrival(half["message_id"]), timeout=10)
            except TimeoutError:
                raise RuntimeError("a committed message never reached the consumer") from None
            result.latencies_ms.append((arrived_at - committed_at) * 1000)
            result.messages += 1
        result.seconds = time.perf_counter() - start
        stop.set()
        await consuming
    finally:
        producer.close()
        consumer.close()
    return result


def run_consumer_latency(url: str, *, samples: int) -> LoadResult:
    return uvloop.run(_run(url, samples))
