"""A stopping coordinator: long polls answer at once, the check-back round finishes.

The whole stop of `coordinator serve` under load is in
tests/acceptance/test_shutdown.py; here each part of it, on the core.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.core.checkback.scheduler import CheckScheduler
from coordinator.domain.checkback import RoundResult
from tests.checkback_helpers import INSTANCE, check_settings, make_due
from tests.factories import GROUP, half

pytestmark = pytest.mark.anyio

LONG_WAIT = 30.0  # what the polls ask for; they must answer long before
PROMPT = 5.0


async def _answered_within(poll: asyncio.Task[list], seconds: float) -> list:
    done, _ = await asyncio.wait({poll}, timeout=seconds)
    assert poll in done, f"the poll still waits {seconds} s after the stop"
    return poll.result()


async def test_waiting_polls_answer_empty_at_once_when_the_server_stops(
    database_url: str,
) -> None:
    async with Coordinator.connect(database_url, Settings(), listen=True) as core:
        await core.delivery.subscribe("billing", "orders")
        receive = asyncio.create_task(core.delivery.receive("billing", wait_seconds=LONG_WAIT))
        checks = asyncio.create_task(
            core.checkback.pull.poll(GROUP, INSTANCE, wait_seconds=LONG_WAIT)
        )
        await asyncio.sleep(0.5)
        assert not receive.done() and not checks.done()

        core.begin_shutdown()
        assert await _answered_within(receive, PROMPT) == []
        assert await _answered_within(checks, PROMPT) == []

        # One that comes while the server stops does not wait either.
        started = time.monotonic()
        assert await core.delivery.receive("billing", wait_seconds=LONG_WAIT) == []
        assert await core.checkback.pull.poll(GROUP, INSTANCE, wait_seconds=LONG_WAIT) == []
        assert time.monotonic() - started < PROMPT


async def test_a_stopping_poll_still_hands_over_what_is_there(database_url: str) -> None:
    async with Coordinator.connect(database_url, Settings(), listen=True) as core:
        await core.delivery.subscribe("billing", "orders")
        await core.transactions.send(half())
        core.begin_shutdown()
        received = await core.delivery.receive("billing", wait_seconds=LONG_WAIT)
        assert [m.topic for m in received] == ["orders"]


async def test_a_round_of_a_stopping_server_ends_after_its_batch(
    database_url: str, db: psycopg.Connection
) -> None:
    settings = check_settings(check_batch_size=2)
    async with Coordinator.connect(database_url, settings) as core:
        await core.checkback.producers.heartbeat(GROUP, INSTANCE)
        sent = [await core.transactions.prepare(half(body=f"order {i}".encode())) for i in range(5)]
        make_due(db, *(s.offset for s in sent))

        core.begin_shutdown()
        stopping = await core.checkback.rounds.run_round()
        assert stopping.claimed == 2  # one batch; the rest stays due for the next round
        (due,) = db.execute(
            "SELECT count(*) FROM messages WHERE id = ANY(%s) AND check_count = 0",
            ([s.offset for s in sent],),
        ).fetchone()
        assert due == 3


async def test_stopping_the_scheduler_lets_the_running_round_finish() -> None:
    started, finished = asyncio.Event(), asyncio.Event()

    async def slow_round() -> RoundResult:
        started.set()
        await asyncio.sleep(0.5)
        finished.set()
        return RoundResult()

    scheduler = CheckScheduler(slow_round, interval_seconds=60)
    scheduler.start()
    await asyncio.wait_for(started.wait(), PROMPT)
    await scheduler.stop()
    assert finished.is_set()


async def test_a_round_that_does_not_finish_in_time_is_cut_short() -> None:
    started = asyncio.Event()
    cancelled = False

    async def stuck_round() -> RoundResult:
        nonlocal cancelled
        started.set()
        try:
            await asyncio.sleep(LONG_WAIT)
        except asyncio.CancelledError:
            cancelled = True
            raise
        return RoundResult()

    scheduler = CheckScheduler(stuck_round, interval_seconds=60)
    scheduler.start()
    await asyncio.wait_for(started.wait(), PROMPT)
    await asyncio.wait_for(scheduler.stop(finish_seconds=0.2), PROMPT)
    assert cancelled
