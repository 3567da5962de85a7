"""Many coordinator nodes on one database: every node claims, no message twice a round."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.states import CheckStatus
from tests.checkback_helpers import (
    INSTANCE,
    check_request,
    check_settings,
    eventually,
    make_due,
    message,
    settled_round,
)
from tests.factories import GROUP, half
from tests.push_receiver import PushReceiver

pytestmark = pytest.mark.anyio

MESSAGES = 60


@pytest.fixture
def settings() -> Settings:
    # Small batches, so the three nodes' rounds interleave over the backlog; a
    # long check interval, so that everything here happens within one round.
    return check_settings(check_batch_size=7, check_interval_seconds=60)


@contextlib.asynccontextmanager
async def three_nodes(database_url: str, settings: Settings) -> AsyncIterator[list[Coordinator]]:
    async with AsyncExitStack() as stack:
        yield [
            await stack.enter_async_context(Coordinator.connect(database_url, settings))
            for _ in range(3)
        ]


@pytest.fixture
async def nodes(database_url: str, settings: Settings) -> AsyncIterator[list[Coordinator]]:
    async with three_nodes(database_url, settings) as started:
        yield started


async def _backlog(node: Coordinator, db: psycopg.Connection) -> list[int]:
    sent = await node.transactions.prepare_batch(
        [half(body=f"m{i}".encode()) for i in range(MESSAGES)]
    )
    offsets = [s.offset for s in sent]
    make_due(db, *offsets)
    return offsets


async def test_three_nodes_check_each_due_message_exactly_once_per_round(
    nodes: list[Coordinator], db: psycopg.Connection
) -> None:
    await nodes[0].checkback.producers.heartbeat(GROUP, INSTANCE)
    offsets = await _backlog(nodes[0], db)

    rounds = await asyncio.gather(*(node.checkback.rounds.run_round() for node in nodes))

    claimed = [c.offset for result in rounds for c in result.checked]
    assert sorted(claimed) == sorted(offsets)  # all of them, none twice
    assert sum(1 for result in rounds if result.checked) >= 2  # the work was shared
    counts = db.execute(
        "SELECT check_count, count(*) FROM messages WHERE id = ANY(%s) GROUP BY 1", (offsets,)
    ).fetchall()
    assert counts == [(1, MESSAGES)]
    pulled = await nodes[2].checkback.pull.poll(GROUP, INSTANCE, max_requests=1000)
    assert sorted(r.offset for r in pulled) == sorted(offsets)


async def test_three_nodes_push_each_due_message_exactly_once_per_round(
    nodes: list[Coordinator], db: psycopg.Connection
) -> None:
    with PushReceiver(lambda _: (200, {"resolution": "commit"})) as receiver:
        await nodes[0].checkback.producers.heartbeat(GROUP, INSTANCE, receiver.url)
        offsets = await _backlog(nodes[0], db)
        await asyncio.gather(*(settled_round(node.checkback) for node in nodes))

    pushes = Counter(receiver.offsets())
    failed = db.execute(
        "SELECT message_offset, status, detail FROM check_requests WHERE status <> 'delivered'"
    ).fetchall()
    assert sorted(pushes) == sorted(offsets) and set(pushes.values()) == {1}, failed
    states = db.execute(
        "SELECT state, resolution_source, count(*) FROM messages GROUP BY 1, 2"
    ).fetchall()
    assert states == [("committed", "check", MESSAGES)]


async def test_a_node_killed_between_claim_and_dispatch_only_delays_the_message(
    database_url: str, db: psycopg.Connection
) -> None:
    settings = check_settings(check_interval_seconds=0.5)
    async with three_nodes(database_url, settings) as nodes:
        await _kill_one_node_mid_round(nodes, db)


async def _kill_one_node_mid_round(nodes: list[Coordinator], db: psycopg.Connection) -> None:
    doomed, *survivors = nodes
    with PushReceiver() as receiver:
        await doomed.checkback.producers.heartbeat(GROUP, INSTANCE, receiver.url)
        sent = await doomed.transactions.prepare(half())
        make_due(db, sent.offset)

        claimed = await doomed.checkback.rounds.claim()  # ... and the node dies before pushing
        assert [c.offset for c in claimed] == [sent.offset]
        assert check_request(db, sent.offset)["status"] == CheckStatus.PENDING

        # the other nodes do not repeat the claimed check early ...
        for node in survivors:
            assert (await node.checkback.rounds.run_round()).claimed == 0
        assert receiver.received == []

        # ... but check the message again once its next check is due
        async def survivors_round() -> int:
            results = await asyncio.gather(*(settled_round(n.checkback) for n in survivors))
            return sum(r.pushed for r in results)

        await eventually(survivors_round, lambda pushed: pushed == 1)

    (pushed,) = receiver.received
    assert pushed.json["check_count"] == 2
    assert message(db, sent.offset)["check_count"] == 2
    assert check_request(db, sent.offset)["status"] == CheckStatus.DELIVERED


async def test_a_restarted_node_does_not_repeat_checks(
    database_url: str, db: psycopg.Connection, settings: Settings
) -> None:
    """RocketMQ #2117: the next check time is stored, so a restart starts nowhere early."""
    settings.check_interval_seconds = 3600.0
    async with Coordinator.connect(database_url, settings) as before:
        await before.checkback.producers.heartbeat(GROUP, INSTANCE)
        sent = await before.transactions.prepare(half())
        make_due(db, sent.offset)
        assert len((await before.checkback.rounds.run_round()).checked) == 1
    async with Coordinator.connect(database_url, settings) as after:
        assert (await after.checkback.rounds.run_round()).claimed == 0
    assert message(db, sent.offset)["check_count"] == 1
