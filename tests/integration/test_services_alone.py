"""The core's services work alone: built from a CoreContext, never from a Coordinator.

Delivery and CheckBack take the pool, the settings and the notifier (and
CheckBack the function that ends a transaction); the scheduler takes the
round it runs and its interval. Each is built here without the object that
composes them in production.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core.checkback import CheckBack
from coordinator.core.checkback.scheduler import CheckScheduler, running_check_scheduler
from coordinator.core.context import CoreContext
from coordinator.core.delivery import Delivery
from coordinator.db.pool import open_pool
from coordinator.domain.checkback import RoundResult
from coordinator.domain.messages import EndRequest, EndResult
from coordinator.domain.states import MessageState
from tests.checkback_helpers import INSTANCE, check_settings, make_due
from tests.factories import GROUP, TOPIC
from tests.push_receiver import PushReceiver

pytestmark = pytest.mark.anyio


@pytest.fixture
async def context(database_url: str) -> AsyncIterator[CoreContext]:
    settings = check_settings()
    pool = open_pool(database_url, min_size=1, max_size=4, timeout=settings.pool_timeout_seconds)
    await pool.open(wait=True)
    try:
        yield CoreContext(pool, settings)
    finally:
        await pool.close()


def _insert_half_message(db: psycopg.Connection) -> int:
    # Stored as the prepare statement would, without the Coordinator that runs it.
    (offset,) = db.execute(
        "INSERT INTO messages (message_id, transaction_id, kind, producer_group, topic, body,"
        " state, next_check_at) VALUES ('alone-1', 'tx-alone-1', 'transactional', %s, %s,"
        " 'x', 'prepared', now()) RETURNING id",
        (GROUP, TOPIC),
    ).fetchone()
    return offset


async def test_delivery_works_from_its_context_alone(context: CoreContext) -> None:
    delivery = Delivery(context)
    subscribed = await delivery.subscribe("billing", TOPIC, "created || paid")
    assert subscribed.created and subscribed.subscription.tags == ("created", "paid")
    assert [s.topic for s in await delivery.subscriptions("billing")] == [TOPIC]
    assert await delivery.receive("billing") == []


async def test_check_back_hands_pushed_answers_to_the_end_function_it_was_given(
    context: CoreContext, db: psycopg.Connection
) -> None:
    ended: list[EndRequest] = []

    async def end(request: EndRequest) -> EndResult:
        ended.append(request)
        return EndResult(
            offset=offset,
            message_id="alone-1",
            transaction_id=request.transaction_id,
            state=MessageState.COMMITTED,
            changed=True,
        )

    checkback = CheckBack(context, end)
    offset = _insert_half_message(db)
    with PushReceiver(lambda _: (200, {"resolution": "commit"})) as receiver:
        await checkback.heartbeat(GROUP, INSTANCE, receiver.url)
        make_due(db, offset)
        result = await checkback.run_round()
        await checkback.settle()
    assert result.pushed == 1 and result.resolved_by_push == 1
    assert [(r.transaction_id, r.producer_group, r.from_check) for r in ended] == [
        ("tx-alone-1", GROUP, True)
    ]


async def test_the_scheduler_runs_the_round_it_was_given() -> None:
    rounds = asyncio.Event()

    async def run_round() -> RoundResult:
        rounds.set()
        return RoundResult()

    scheduler = CheckScheduler(run_round, interval_seconds=0.05)
    scheduler.start()
    try:
        await asyncio.wait_for(rounds.wait(), timeout=10)
    finally:
        await scheduler.stop()


async def test_a_disabled_scheduler_runs_nothing() -> None:
    async def run_round() -> RoundResult:
        raise AssertionError("a disabled scheduler ran a round")

    settings = Settings(check_scheduler_enabled=False, check_scan_interval_seconds=0.01)
    async with running_check_scheduler(run_round, settings) as scheduler:
        await asyncio.sleep(0.1)
    assert scheduler is None
