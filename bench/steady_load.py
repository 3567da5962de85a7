"""The constant load of the steady-state benchmark: producers at a fixed rate, two
consumer groups draining what they commit.

Producers do not run flat out: each keeps a schedule (rate / producers
transactions a second) and sleeps until the next slot, so the load is the
same in every window and what may change over the run is the latency of a
transaction, and the throughput only if the server falls behind the
schedule. A transaction is a prepare then its end (commit, or rollback for
every `rollback_every`-th one), the latency their two round trips. Every
sample is kept with the time it finished, so the run can be cut into windows
afterwards. Each consumer group receives in batches and acks what it got
with one batch ack, as a consumer keeping up would.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from bench.http_load import Connection, connect

PRODUCER_GROUP = "bench-steady-producers"
TOPIC = "bench-steady"
CONSUMER_GROUPS = ("bench-steady-a", "bench-steady-b")
BODY = "order 1001 created"


@dataclass
class Samples:
    """What the load did, each event with the time it happened (perf_counter)."""

    transactions: list[tuple[float, float, bool]] = field(default_factory=list)
    # (finished, latency seconds, committed)
    consumed: dict[str, list[tuple[float, int]]] = field(
        default_factory=lambda: {group: [] for group in CONSUMER_GROUPS}
    )  # group -> (acked at, messages)
    behind: int = 0  # slots a producer reached late (the server did not keep up)


@dataclass
class SteadyLoad:
    url: str
    rate: float
    producers: int
    rollback_every: int
    samples: Samples = field(default_factory=Samples)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _connections: list[Connection] = field(default_factory=list)

    async def start(self) -> None:
        setup = await connect(self.url)
        self._connections.append(setup)
        for group in CONSUMER_GROUPS:
            await setup.request(
                "PUT",
                f"/v1/consumer-groups/{group}/subscriptions/{TOPIC}",
                b'{"expression": "*"}',
            )
        for group in CONSUMER_GROUPS:
            connection = await connect(self.url)
            self._connections.append(connection)
            self._tasks.append(asyncio.create_task(self._consume(connection, group)))
        interval = self.producers / self.rate
        began = time.perf_counter()
        for index in range(self.producers):
            connection = await connect(self.url)
            self._connections.append(connection)
            # Spread the producers' slots over one interval.
            first = began + interval * index / self.producers
            self._tasks.append(
                asyncio.create_task(self._produce(connection, index, first, interval))
            )

    async def stop(self) -> None:
        self._stop.set()
        try:
            await asyncio.gather(*self._tasks)
        finally:
            for connection in self._connections:
                connection.close()

    async def _produce(
        self, connection: Connection, index: int, first: float, interval: float
    ) -> None:
        prepare = json.dumps(
            {"topic": TOPIC, "producer_group": PRODUCER_GROUP, "body_text": BODY}
        ).encode()
        commit = json.dumps({"producer_group": PRODUCER_GROUP, "resolution": "commit"}).encode()
        rollback = json.dumps({"producer_group": PRODUCER_GROUP, "resolution": "rollback"}).encode()
        slot = first
        sent = index  # so that the producers' rollbacks do not fall on the same slots
        while not self._stop.is_set():
            wait = slot - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            elif wait < -interval:
                self.samples.behind += 1
            sent += 1
            committed = sent % self.rollback_every != 0
            start = time.perf_counter()
            half = await connection.post("/v1/transactions", prepare)
            await connection.post(
                f"/v1/transactions/{half['transaction_id']}/end", commit if committed else rollback
            )
            done = time.perf_counter()
            self.samples.transactions.append((done, done - start, committed))
            # A late producer does not make up for lost slots in a burst: the
            # rate stays the rate.
            slot = max(slot + interval, done - interval)

    async def _consume(self, connection: Connection, group: str) -> None:
        receive = json.dumps(
            {"max_messages": 32, "wait_seconds": 1, "invisible_seconds": 60}
        ).encode()
        got = self.samples.consumed[group]
        while not self._stop.is_set():
            answer = await connection.post(f"/v1/consumer-groups/{group}/receive", receive)
            handles = [message["receipt_handle"] for message in answer["messages"]]
            if not handles:
                continue
            acked = await connection.post(
                f"/v1/consumer-groups/{group}/ack/batch",
                json.dumps({"receipt_handles": handles}).encode(),
            )
            ok = sum(1 for result in acked["results"] if result["outcome"] == "acked")
            got.append((time.perf_counter(), ok))
