"""A constant single-message load on one layout: the hot path's own SQL, no server.

Each client prepares one transactional message (the named query
`insert_messages`, as the coordinator's prepare runs it) and then commits it
(`end_transactions`), one statement each, on its own autocommit connection
whose search_path selects the layout. Every message's latency is kept with
the time it finished, so that a window (before, during, after a removal)
can be cut out of one run.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field

import psycopg
from psycopg.types.json import Jsonb

from coordinator.db.queries import query

GROUP = TOPIC = "bench-retention-load"
BODY = b"order 1001 created\n"


@dataclass(frozen=True)
class LoadFigures:
    messages: int
    seconds: float
    messages_per_second: float
    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, latencies: list[float], seconds: float) -> LoadFigures:
        ordered = sorted(latencies)
        return cls(
            messages=len(ordered),
            seconds=round(seconds, 3),
            messages_per_second=round(len(ordered) / seconds, 1) if seconds > 0 else 0.0,
            p50_ms=round(_percentile(ordered, 50) * 1000, 3),
            p99_ms=round(_percentile(ordered, 99) * 1000, 3),
            max_ms=round(ordered[-1] * 1000, 3) if ordered else 0.0,
        )


def _percentile(ordered: list[float], percent: float) -> float:
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, round(percent / 100 * len(ordered)) - 1))
    return ordered[index]


@dataclass
class Load:
    """Clients running until stopped; `window` gives the figures of a span of it."""

    url: str
    schema: str
    clients: int
    samples: list[tuple[float, float]] = field(default_factory=list)  # (finished, latency)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self) -> None:
        connections = [
            await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, options=f"-c search_path={self.schema},coordinator"
            )
            for _ in range(self.clients)
        ]
        for conn in connections:  # as the coordinator's pool sets up each connection
            await conn.execute(query("configure_session"))
        self._tasks = [asyncio.create_task(self._client(conn)) for conn in connections]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    def window(self, since: float, until: float) -> LoadFigures:
        latencies = [latency for done, latency in self.samples if since <= done < until]
        return LoadFigures.of(latencies, until - since)

    async def _client(self, conn: psycopg.AsyncConnection) -> None:
        prepare, commit = query("insert_messages"), query("end_transactions")
        async with conn:
            while not self._stop.is_set():
                transaction_id = uuid.uuid4().hex
                began = time.perf_counter()
                await conn.execute(prepare, _prepare_params(transaction_id))
                await conn.execute(commit, _commit_params(transaction_id))
                done = time.perf_counter()
                self.samples.append((done, done - began))


async def measure(url: str, schema: str, clients: int, seconds: float) -> LoadFigures:
    """The load alone for `seconds`, after a short warm-up (connections, plans)."""
    load = Load(url, schema, clients)
    await load.start()
    await asyncio.sleep(min(1.0, seconds / 4))
    since = time.perf_counter()
    await asyncio.sleep(seconds)
    until = time.perf_counter()
    await load.stop()
    return load.window(since, until)


def _prepare_params(transaction_id: str) -> dict[str, object]:
    return {
        "message_ids": [uuid.uuid4().hex],
        "transaction_ids": [transaction_id],
        "producer_groups": [GROUP],
        "topics": [TOPIC],
        "tags": [None],
        "keys": [""],
        "message_groups": [None],
        "bodies": [BODY],
        "properties": [Jsonb({})],
        "immunity_seconds": [None],
        "deliver_at": [None],
        "trace_contexts": [None],
        "kind": "transactional",
        "state": "prepared",
        "transaction_timeout_seconds": 6.0,
    }


def _commit_params(transaction_id: str) -> dict[str, object]:
    return {
        "transaction_ids": [transaction_id],
        "producer_groups": [GROUP],
        "message_ids": [None],
        "to_states": ["committed"],
        "sources": ["client"],
    }
