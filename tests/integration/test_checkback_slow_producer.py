"""A check URL that never answers holds back only its own pushes.

A round hands its pushes over and ends; the next rounds claim, and push to
other producers, while a push to a hanging URL waits for its timeout. The
hanging URL is not sent the same message again meanwhile, and its push,
once timed out, is a failed push like any other: the check was counted and
the message waits for its next one.
"""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from coordinator.core import Coordinator
from coordinator.core.checkback import rounds
from coordinator.core.checkback.scheduler import CheckScheduler
from coordinator.domain.states import CheckStatus, Resolution
from tests.checkback_helpers import INSTANCE, check_request, check_settings, make_due, message
from tests.factories import GROUP, half
from tests.push_receiver import PushReceiver, SilentCheckUrl

pytestmark = pytest.mark.anyio

SLOW_GROUP = "slow-svc"
DEADLINE = 10.0  # what the tests wait at most; never a measure of speed


async def _until(condition: str, check: object, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {timeout} s: {condition}"
        await asyncio.sleep(0.05)


def _state(db: psycopg.Connection, offset: int) -> str:
    return str(message(db, offset)["state"])


async def test_a_hanging_check_url_does_not_delay_other_producers(
    database_url: str, db: psycopg.Connection
) -> None:
    # The hanging push waits 30 s; everything below happens well within that.
    # The check interval is short: the slow message is due again meanwhile.
    settings = check_settings(check_push_timeout_seconds=30.0, check_interval_seconds=0.3)
    answer = (200, {"resolution": Resolution.COMMIT.value})
    async with Coordinator.connect(database_url, settings) as core:
        with SilentCheckUrl() as silent, PushReceiver(lambda _: answer) as fast:
            await core.checkback.producers.heartbeat(SLOW_GROUP, INSTANCE, silent.url)
            await core.checkback.producers.heartbeat(GROUP, INSTANCE, fast.url)
            slow = await core.transactions.prepare(half(producer_group=SLOW_GROUP))
            first = await core.transactions.prepare(half())
            make_due(db, slow.offset, first.offset)

            scheduler = CheckScheduler(core.checkback.rounds.run_round, interval_seconds=0.1)
            scheduler.start()
            try:
                await _until("the slow push is sent", lambda: silent.connections == 1)
                await _until(
                    "the first fast message is resolved",
                    lambda: _state(db, first.offset) == "committed",
                )
                # A message due after the slow push started: later rounds take it.
                second = await core.transactions.prepare(half(body=b"order 1002 created"))
                make_due(db, second.offset)
                await _until(
                    "the second fast message is resolved",
                    lambda: _state(db, second.offset) == "committed",
                )
                make_due(db, slow.offset)
                await asyncio.sleep(0.5)  # some rounds with the slow message due
            finally:
                await scheduler.stop()

            # Still waiting for its one answer: not claimed, not pushed again.
            assert silent.connections == 1
            assert (message(db, slow.offset)["state"], message(db, slow.offset)["check_count"]) == (
                "prepared",
                1,
            )
            assert check_request(db, slow.offset)["status"] == CheckStatus.PUSHING
            assert sorted(fast.offsets()) == sorted([first.offset, second.offset])
        # The silent URL is gone, its connection closed: the push fails now.
        await asyncio.wait_for(core.checkback.rounds.settle(), DEADLINE)
        assert check_request(db, slow.offset)["status"] == CheckStatus.FAILED


async def test_a_push_that_times_out_is_a_failed_check_and_the_next_check_follows(
    database_url: str, db: psycopg.Connection
) -> None:
    settings = check_settings(check_push_timeout_seconds=1.0)
    async with Coordinator.connect(database_url, settings) as core:
        with SilentCheckUrl() as silent:
            await core.checkback.producers.heartbeat(SLOW_GROUP, INSTANCE, silent.url)
            slow = await core.transactions.prepare(half(producer_group=SLOW_GROUP))
            make_due(db, slow.offset)
            first = await core.checkback.rounds.run_round()
            assert first.handed_to_push == 1
            await _until("the push is sent", lambda: silent.connections == 1)

            make_due(db, slow.offset)
            assert (await core.checkback.rounds.run_round()).claimed == 0  # its push is in flight

            await asyncio.wait_for(core.checkback.rounds.settle(), DEADLINE)
            assert (first.pushed, first.push_failures) == (0, 1)
            request = check_request(db, slow.offset)
            assert request["status"] == CheckStatus.FAILED
            assert request["detail"] == (
                "no whole answer from the check URL within 1 s (check_push_timeout_seconds)"
            )
            row = message(db, slow.offset)
            assert (row["state"], row["check_count"]) == ("prepared", 1)  # the check counted

            make_due(db, slow.offset)
            assert len((await core.checkback.rounds.run_round()).checked) == 1
            await _until("the next check is pushed", lambda: silent.connections == 2)
            assert message(db, slow.offset)["check_count"] == 2


async def test_a_stopping_node_cuts_a_hanging_push_short_and_records_why(
    database_url: str, db: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rounds, "PUSHES_FINISH_SECONDS", 0.5)
    settings = check_settings(check_push_timeout_seconds=30.0)
    with SilentCheckUrl() as silent:
        async with Coordinator.connect(database_url, settings) as core:
            await core.checkback.producers.heartbeat(SLOW_GROUP, INSTANCE, silent.url)
            slow = await core.transactions.prepare(half(producer_group=SLOW_GROUP))
            make_due(db, slow.offset)
            await core.checkback.rounds.run_round()
            await _until("the push is sent", lambda: silent.connections == 1)
            core.begin_shutdown()
            closing = time.monotonic()
        # closed (the pool after the push) long before the push's own timeout
        assert time.monotonic() - closing < DEADLINE
    request = check_request(db, slow.offset)
    assert request["status"] == CheckStatus.FAILED
    assert request["detail"] == "the coordinator stopped before the answer"
