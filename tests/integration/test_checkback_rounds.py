"""Check-back rounds against real PostgreSQL: when messages are checked, and when not."""

from __future__ import annotations

import itertools
from datetime import timedelta

import psycopg
import pytest

from coordinator.config import Settings
from coordinator.core import Coordinator
from coordinator.domain.states import CheckStatus, Resolution
from tests.checkback_helpers import (
    INSTANCE,
    check_request,
    check_settings,
    eventually,
    history,
    make_due,
    message,
)
from tests.factories import GROUP, end, half

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings() -> Settings:
    return check_settings()


async def _checked(core: Coordinator, db: psycopg.Connection, offset: int) -> dict:
    await core.checkback.rounds.run_round()
    return message(db, offset)


async def test_the_first_check_waits_for_the_timeout_or_the_immunity(
    database_url: str, db: psycopg.Connection
) -> None:
    settings = check_settings(transaction_timeout_seconds=0.6, check_interval_seconds=60)
    async with Coordinator.connect(database_url, settings) as core:
        await core.checkback.producers.heartbeat(GROUP, INSTANCE)
        plain = await core.transactions.prepare(half())
        immune = await core.transactions.prepare(half(body=b"immune", check_immunity_seconds=1.5))

        first = await core.checkback.rounds.run_round()
        assert first.claimed == 0  # nothing is due right after sending
        assert message(db, plain.offset)["check_count"] == 0

        await eventually(lambda: _checked(core, db, plain.offset), lambda m: m["check_count"] == 1)
        # the timeout passed, the immunity did not: only the plain message was checked
        assert message(db, immune.offset)["check_count"] == 0
        await eventually(lambda: _checked(core, db, immune.offset), lambda m: m["check_count"] == 1)

    for sent, earliest in ((plain, 0.6), (immune, 1.5)):
        born = message(db, sent.offset)["born_at"]
        claimed = check_request(db, sent.offset)["claimed_at"]
        assert claimed - born >= timedelta(seconds=earliest)


async def test_later_checks_come_every_check_interval(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.checkback.producers.heartbeat(GROUP, INSTANCE)
    sent = await core.transactions.prepare(half())
    claimed_at = []
    for count in (1, 2, 3):
        await eventually(
            lambda: _checked(core, db, sent.offset), lambda m, n=count: m["check_count"] == n
        )
        request = check_request(db, sent.offset)
        claimed_at.append(request["claimed_at"])
        # the next check is planned one interval after this one, in the claim itself
        assert message(db, sent.offset)["next_check_at"] - request["claimed_at"] == timedelta(
            seconds=0.3
        )
    assert all(b - a >= timedelta(seconds=0.3) for a, b in itertools.pairwise(claimed_at))
    assert check_request(db, sent.offset)["check_count"] == 3
    # checks are not state changes: the history holds only the creation
    assert len(history(db, sent.offset)) == 1


async def test_backoff_spaces_checks_exponentially_up_to_a_cap(
    database_url: str, db: psycopg.Connection
) -> None:
    settings = check_settings(
        check_max=10,
        check_interval_seconds=0.25,
        check_backoff=True,
        check_backoff_factor=2.0,
        check_backoff_max_seconds=1.0,
    )
    async with Coordinator.connect(database_url, settings) as core:
        await core.checkback.producers.heartbeat(GROUP, INSTANCE)
        sent = await core.transactions.prepare(half())
        gaps = []
        for _ in range(5):
            make_due(db, sent.offset)
            await core.checkback.rounds.run_round()
            row = message(db, sent.offset)
            gaps.append(row["next_check_at"] - check_request(db, sent.offset)["claimed_at"])
    assert gaps == [timedelta(seconds=s) for s in (0.25, 0.5, 1.0, 1.0, 1.0)]


async def test_a_message_that_used_its_budget_is_discarded(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.checkback.producers.heartbeat(GROUP, INSTANCE)
    sent = await core.transactions.prepare(half())
    for _ in range(3):  # check_max = 3
        make_due(db, sent.offset)
        assert len((await core.checkback.rounds.run_round()).checked) == 1
    assert message(db, sent.offset)["state"] == "prepared"

    make_due(db, sent.offset)
    result = await core.checkback.rounds.run_round()
    assert [d.offset for d in result.discarded] == [sent.offset] and not result.checked

    row = message(db, sent.offset)
    assert (row["state"], row["check_count"], row["resolution_source"]) == (
        "discarded",
        3,
        "discard",
    )
    assert row["resolved_at"] is not None and row["next_check_at"] is None
    assert history(db, sent.offset)[-1] == (
        "discard",
        "prepared",
        "discarded",
        "no resolution after 3 check-backs (check max)",
    )
    assert check_request(db, sent.offset) is None  # nothing left open for it
    # kept for inspection
    record = await core.inspection.get_message(offset=sent.offset)
    assert record.state.value == "discarded"


async def test_a_message_older_than_retention_expires(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.checkback.producers.heartbeat(GROUP, INSTANCE)
    old = await core.transactions.prepare(half())
    db.execute(
        "UPDATE messages SET born_at = now() - interval '73 hours', next_check_at = now() "
        "WHERE id = %s",
        (old.offset,),
    )
    result = await core.checkback.rounds.run_round()
    assert [e.offset for e in result.expired] == [old.offset]
    row = message(db, old.offset)
    assert (row["state"], row["resolution_source"], row["check_count"]) == ("expired", "expiry", 0)
    assert history(db, old.offset)[-1] == (
        "expiry",
        "prepared",
        "expired",
        "still prepared after the retention of 72 hours",
    )


async def test_the_next_check_is_never_planned_after_the_message_expires(
    core: Coordinator, db: psycopg.Connection, settings: Settings
) -> None:
    """Nearly expired: its next check is at the moment it expires, not an interval later."""
    await core.checkback.producers.heartbeat(GROUP, INSTANCE)
    sent = await core.transactions.prepare(half())
    db.execute(
        "UPDATE messages SET born_at = now() - interval '72 hours' + interval '0.1 seconds', "
        "next_check_at = now() WHERE id = %s",
        (sent.offset,),
    )
    await core.checkback.rounds.run_round()
    row = message(db, sent.offset)
    assert row["check_count"] == 1
    assert row["next_check_at"] == row["born_at"] + timedelta(hours=72)
    await eventually(lambda: _checked(core, db, sent.offset), lambda m: m["state"] == "expired")


async def test_resolved_messages_are_never_checked(
    core: Coordinator, db: psycopg.Connection
) -> None:
    """RocketMQ #1517, #6737: no check-back for a message that already has its answer."""
    await core.checkback.producers.heartbeat(GROUP, INSTANCE)
    committed, rolled_back, pending = await core.transactions.prepare_batch(
        [half(body=f"m{i}".encode()) for i in range(3)]
    )
    await core.transactions.end(end(committed.transaction_id, Resolution.COMMIT))
    await core.transactions.end(end(rolled_back.transaction_id, Resolution.ROLLBACK))
    # even with a due time forced onto them, resolved rows are not claimed
    make_due(db, committed.offset, rolled_back.offset, pending.offset)
    result = await core.checkback.rounds.run_round()
    assert [c.offset for c in result.checked] == [pending.offset]
    for offset in (committed.offset, rolled_back.offset):
        assert message(db, offset)["check_count"] == 0
        assert check_request(db, offset) is None


async def test_a_message_resolved_after_its_check_was_claimed_is_not_handed_out(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.checkback.producers.heartbeat(GROUP, INSTANCE)
    sent = await core.transactions.prepare(half())
    make_due(db, sent.offset)
    await core.checkback.rounds.run_round()
    assert check_request(db, sent.offset)["status"] == CheckStatus.PENDING
    await core.transactions.end(end(sent.transaction_id, Resolution.COMMIT))
    assert check_request(db, sent.offset) is None  # closed with the message
    assert await core.checkback.pull.poll(GROUP, INSTANCE) == []


async def test_without_a_live_producer_the_budget_is_not_burned(
    core: Coordinator, db: psycopg.Connection
) -> None:
    sent = await core.transactions.prepare(half())
    for attempt in (1, 2, 3, 4, 5):  # more than check_max
        make_due(db, sent.offset)
        result = await core.checkback.rounds.run_round()
        assert [w.offset for w in result.waiting] == [sent.offset]
        row = message(db, sent.offset)
        assert (row["state"], row["check_count"]) == ("prepared", 0)
        request = check_request(db, sent.offset)
        assert request["status"] == CheckStatus.NO_PRODUCER
        assert request["no_producer_attempts"] == attempt
        assert row["next_check_at"] - request["claimed_at"] == timedelta(seconds=0.3)

    # an instance that stopped heart-beating is not live either
    await core.checkback.producers.heartbeat(GROUP, INSTANCE)
    db.execute("UPDATE producers SET last_seen_at = now() - interval '1 hour'")
    make_due(db, sent.offset)
    assert len((await core.checkback.rounds.run_round()).waiting) == 1
    assert message(db, sent.offset)["check_count"] == 0


async def test_a_producer_coming_back_is_checked_with_at_once(
    core: Coordinator, db: psycopg.Connection, settings: Settings
) -> None:
    """Messages that waited for a producer do not wait another interval once one is live."""
    settings.check_interval_seconds = 3600.0
    sent = await core.transactions.prepare(half())
    make_due(db, sent.offset)
    assert len((await core.checkback.rounds.run_round()).waiting) == 1
    assert len((await core.checkback.rounds.run_round()).waiting) == 0  # next check in an hour

    await core.checkback.producers.heartbeat(GROUP, INSTANCE)
    result = await core.checkback.rounds.run_round()
    assert [c.offset for c in result.checked] == [sent.offset]
    assert message(db, sent.offset)["check_count"] == 1
    assert check_request(db, sent.offset)["no_producer_attempts"] == 1  # the record stays


async def test_the_engine_keeps_one_check_request_per_pending_message(
    core: Coordinator, db: psycopg.Connection
) -> None:
    """RocketMQ #1544: nothing grows with the number of checks."""
    await core.checkback.producers.heartbeat(GROUP, INSTANCE)
    sent = await core.transactions.prepare_batch([half(body=f"m{i}".encode()) for i in range(5)])
    offsets = [s.offset for s in sent]
    for _ in range(3):
        make_due(db, *offsets)
        await core.checkback.rounds.run_round()
    assert db.execute("SELECT count(*) FROM check_requests").fetchone() == (5,)
    for s in sent[:3]:
        await core.transactions.end(end(s.transaction_id, Resolution.ROLLBACK))
    assert db.execute("SELECT count(*) FROM check_requests").fetchone() == (2,)
    assert db.execute("SELECT count(*) FROM message_history").fetchone() == (5 + 3,)


async def test_producers_not_heard_from_for_long_are_forgotten(
    core: Coordinator, db: psycopg.Connection
) -> None:
    await core.checkback.producers.heartbeat(GROUP, "old-instance")
    await core.checkback.producers.heartbeat(GROUP, INSTANCE)
    db.execute(
        "UPDATE producers SET last_seen_at = now() - interval '2 hours' "
        "WHERE instance_id = 'old-instance'"
    )
    await core.checkback.rounds.run_round()
    assert [p.instance_id for p in await core.checkback.producers.instances()] == [INSTANCE]
